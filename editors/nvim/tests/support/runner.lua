-- Runs registered tests one after another: PI_BRIDGE_TEST_FILTER (Lua patterns separated by `;`)
-- picks the ones whose name matches; each prints `ok` or `FAIL` with its time and traceback.
--- @param tests { name: string, fn: fun() }[]
--- @param say fun(line: string)
--- @return integer passed, integer failed
return function(tests, say)
  local filter = os.getenv('PI_BRIDGE_TEST_FILTER')
  local passed, failed = 0, 0
  for _, t in ipairs(tests) do
    local wanted = not filter
      or vim.iter(vim.split(filter, ';', { plain = true })):any(function(f)
        return t.name:find(f) ~= nil
      end)
    if wanted then
      local t0 = vim.uv.hrtime()
      local ok, err = xpcall(t.fn, debug.traceback)
      local secs = (vim.uv.hrtime() - t0) / 1e9
      if ok then
        passed = passed + 1
        say(('ok   %s (%.1fs)'):format(t.name, secs))
      else
        failed = failed + 1
        say(('FAIL %s (%.1fs)\n%s'):format(t.name, secs, err))
      end
    end
  end
  return passed, failed
end
