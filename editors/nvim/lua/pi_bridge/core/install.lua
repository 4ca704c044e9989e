--- The plugin's own bridge: a venv under stdpath('data')/pi_bridge with the bridge installed from
--- this plugin's checkout. `build()` is the lazy.nvim `build` step (and :PiBridgeInstall);
--- `resolve_cmd()` makes a `pi-bridge` command use that venv once it exists.
local M = {}

M.MIN_PYTHON = { 3, 11 }
local PYTHON_CANDIDATES = { 'python3.13', 'python3.12', 'python3.11', 'python3' }
local TIMEOUT_MS = 600000

--- Where the plugin keeps its venv.
--- @return string
function M.dir()
  return vim.fn.stdpath('data') .. '/pi_bridge'
end

--- @return string
function M.venv()
  return M.dir() .. '/venv'
end

--- The `pi-bridge` script inside the plugin's venv (it may not exist yet).
--- @return string
function M.venv_bridge()
  return M.venv() .. '/bin/pi-bridge'
end

--- The checkout this plugin was loaded from: the nearest parent of this file with a pyproject.toml
--- (editors/nvim sits two levels below it), or nil. The file's real path is searched: a native
--- package is a symlink (pack/*/start/pi_bridge -> <checkout>/editors/nvim), and its parents
--- under stdpath('data') hold no pyproject.toml.
--- @return string?
function M.checkout()
  local file = debug.getinfo(1, 'S').source:sub(2)
  local here = vim.fn.fnamemodify(vim.uv.fs_realpath(file) or file, ':p:h')
  local found = vim.fs.find('pyproject.toml', { upward = true, path = here, type = 'file' })[1]
  return found and vim.fs.dirname(found) or nil
end

--- `python --version` as { major, minor } and its text, or nil.
local function python_version(python)
  local ok, obj = pcall(function()
    return vim.system({ python, '--version' }, { text = true }):wait(15000)
  end)
  if not ok or obj.code ~= 0 then
    return nil
  end
  local text = vim.trim((obj.stdout or '') .. (obj.stderr or ''))
  local major, minor = text:match('Python (%d+)%.(%d+)')
  if not major then
    return nil
  end
  return { tonumber(major), tonumber(minor) }, text
end

local function new_enough(version)
  return version[1] > M.MIN_PYTHON[1]
    or (version[1] == M.MIN_PYTHON[1] and version[2] >= M.MIN_PYTHON[2])
end

--- A Python >= 3.11 to create the venv with: `python` if given, else the first of
--- python3.13, python3.12, python3.11, python3 on PATH that is new enough.
--- @param python string?
--- @return string? path, string? version_text, string? problem
function M.find_python(python)
  local candidates = python and { python } or PYTHON_CANDIDATES
  local seen = {}
  for _, name in ipairs(candidates) do
    local exe = vim.fn.exepath(name)
    if exe ~= '' then
      local version, text = python_version(exe)
      if version and new_enough(version) then
        return exe, text, nil
      end
      seen[#seen + 1] = ('%s is %s'):format(exe, text or 'unusable')
    end
  end
  if #seen > 0 then
    return nil, nil, 'no Python >= 3.11 (' .. table.concat(seen, '; ') .. ')'
  end
  return nil, nil, 'no python3 on PATH'
end

--- The command that installs the bridge by hand, as `build()` runs it.
--- @return string
function M.build_command()
  return ':PiBridgeInstall'
end

local function run(argv, what)
  local obj = vim.system(argv, { text = true }):wait(TIMEOUT_MS)
  if obj.code ~= 0 then
    error(
      ('pi_bridge: %s failed (exit %s): %s\n%s'):format(
        what,
        tostring(obj.code),
        table.concat(argv, ' '),
        vim.trim((obj.stderr or '') .. '\n' .. (obj.stdout or ''))
      ),
      0
    )
  end
end

--- Create (or refresh) the venv and install the bridge from this plugin's checkout into it.
--- Throws with the failing command and its output; lazy.nvim shows that as the build's error.
--- @param opts { python: string?, checkout: string? }?
--- @return string bridge the venv's pi-bridge
function M.build(opts)
  opts = opts or {}
  local checkout = opts.checkout or M.checkout()
  if not checkout then
    error('pi_bridge: cannot find the pi-bridge checkout (pyproject.toml) above the plugin', 0)
  end
  local python, _, problem = M.find_python(opts.python)
  if not python then
    error('pi_bridge: ' .. problem .. '; install Python >= 3.11 and run the build again', 0)
  end
  vim.fn.mkdir(M.dir(), 'p')
  run({ python, '-m', 'venv', '--clear', M.venv() }, 'creating the venv')
  local venv_python = M.venv() .. '/bin/python'
  run(
    { venv_python, '-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', checkout },
    'installing the bridge'
  )
  return M.venv_bridge()
end

--- `cmd` with a leading `pi-bridge` replaced by the venv's once the build step made it.
--- @param cmd string[]
--- @return string[]
function M.resolve_cmd(cmd)
  if cmd[1] == 'pi-bridge' and vim.fn.executable(M.venv_bridge()) == 1 then
    local resolved = vim.deepcopy(cmd)
    resolved[1] = M.venv_bridge()
    return resolved
  end
  return cmd
end

return M
