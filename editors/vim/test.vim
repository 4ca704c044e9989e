" Drive pi-bridge from Vim 9's built-in LSP channel (job_start with in_mode/out_mode 'lsp').
"
"   vim -Nu NONE -i NONE -es -S editors/vim/test.vim </dev/null
"
" Env: PI_BRIDGE_PYTHON (python able to run `-m bridge`; default <repo>/.venv/bin/python), PATH with
" Node 22 and pi first (<repo>/.tools/node_modules/.bin is prepended when present).
" A `text` run with the bridge's scripted model: the assistant deltas, concatenated, must equal
" terminal.completed's text and the pi/run result. Then a `slow` run is cancelled with
" $/cancelRequest and must answer -32800 with data.status "cancelled". Then the client of
" pi_bridge.vim: a second :PiRun continues the first one's conversation, :PiNew starts over.
" Then its approvals in ask mode (deny, allow, always allow and the rule removed with
" :PiPermissions, a key in the real popup, a cancel while the popup is open, :PiMode plan and
" full) and the agent's own dialogs (pi/ask from a user extension in pi's agent dir, answered and
" dismissed; its notify as window/showMessage). Then :PiAgent: the fake pi as a second agent, a
" missing one refused, completion, and a switch back to pi that starts anew. Prints `N passed, M failed`.

let s:repo = fnamemodify(expand('<sfile>:p'), ':h:h:h')
let s:python = empty($PI_BRIDGE_PYTHON) ? s:repo . '/.venv/bin/python' : $PI_BRIDGE_PYTHON
let s:passed = 0
let s:failed = 0
let s:messages = {}
let s:responses = {}
let s:output = []

" Collected and shown with :print at the end: in -es mode :print is what reaches stdout (a
" writefile() to /dev/stdout would open a new file description, clobbered by the caller's writes).
func s:Out(line) abort
  call add(s:output, a:line)
endfunc

func s:Check(ok, what) abort
  if a:ok
    let s:passed += 1
    call s:Out('ok   ' . a:what)
  else
    let s:failed += 1
    call s:Out('FAIL ' . a:what)
  endif
endfunc

func s:Eq(expected, actual, what) abort
  let ok = a:expected ==# a:actual
  call s:Check(ok, a:what . (ok ? '' : ': expected ' . string(a:expected) . ', got ' . string(a:actual)))
endfunc

" Wait on a condition with a timeout; :sleep lets Vim dispatch channel messages meanwhile.
func s:WaitFor(cond, timeout_ms) abort
  let start = reltime()
  while !eval(a:cond)
    if reltimefloat(reltime(start)) * 1000 > a:timeout_ms
      return 0
    endif
    sleep 10m
  endwhile
  return 1
endfunc

" Channel callback: every server-to-client message that is not the answer of a callback request.
func s:OnMessage(channel, msg) abort
  if get(a:msg, 'method', '') ==# 'pi/message'
    let run_id = a:msg.params.runId
    let s:messages[run_id] = add(get(s:messages, run_id, []), a:msg.params)
  endif
endfunc

func s:OnResponse(run_id, channel, msg) abort
  let s:responses[a:run_id] = a:msg
endfunc

func s:Run(ch, run_id, model) abort
  let params = #{prompt: 'Say hello to Vim', runId: a:run_id, model: a:model}
  return ch_sendexpr(a:ch, #{method: 'pi/run', params: params},
        \ #{callback: function('s:OnResponse', [a:run_id])})
endfunc

func s:Types(run_id) abort
  return map(copy(get(s:messages, a:run_id, [])), 'v:val.type')
endfunc

func s:Main() abort
  let env = {}
  if isdirectory(s:repo . '/.tools/node_modules/.bin')
    let env.PATH = s:repo . '/.tools/node_modules/.bin:' . $PATH
  endif
  let job = job_start([s:python, '-m', 'bridge', '--scripted-model'], #{
        \ in_mode: 'lsp', out_mode: 'lsp', err_mode: 'nl', err_io: 'null',
        \ callback: function('s:OnMessage'), cwd: s:repo, env: env, noblock: 1})
  call s:Eq('run', job_status(job), 'the bridge started')
  let ch = job_getchannel(job)

  let init = ch_evalexpr(ch, #{method: 'initialize', params: #{
        \ processId: getpid(), rootUri: v:null, capabilities: {}, initializationOptions: {}}},
        \ #{timeout: 30000})
  let result = get(init, 'result', {})
  call s:Eq('pi-bridge', get(get(result, 'serverInfo', {}), 'name', ''), 'serverInfo.name')
  let pib = get(get(get(result, 'capabilities', {}), 'experimental', {}), 'piBridge', {})
  call s:Eq(1, get(pib, 'protocolVersion', 0), 'protocolVersion')
  call ch_sendexpr(ch, #{method: 'initialized', params: {}})

  " A streamed run: deltas == terminal text == result text.
  call s:Run(ch, 'vim-text', 'text')
  call s:Check(s:WaitFor('has_key(s:responses, "vim-text")', 90000), 'pi/run answered')
  let msgs = get(s:messages, 'vim-text', [])
  call s:Eq(range(1, len(msgs)), map(copy(msgs), 'v:val.seq'), 'seq rises by 1 from 1')
  call s:Eq('terminal.completed', empty(msgs) ? '' : msgs[-1].type, 'the last message')
  let deltas = filter(copy(msgs), 'v:val.type ==# "assistant"')
  call s:Check(len(deltas) > 1, 'several assistant deltas (' . len(deltas) . ')')
  let text = join(map(copy(deltas), 'v:val.content.text'), '')
  let final = empty(msgs) ? '' : get(msgs[-1].content, 'text', '')
  call s:Check(!empty(text), 'assistant text is not empty')
  call s:Eq(final, text, 'concatenated assistant deltas == terminal.completed text')
  let answer = get(s:responses, 'vim-text', {})
  call s:Eq('completed', get(get(answer, 'result', {}), 'status', ''), 'result status')
  call s:Eq(final, get(get(answer, 'result', {}), 'text', ''), 'result text')

  " A cancelled run: $/cancelRequest naming the pi/run request answers -32800.
  let sent = s:Run(ch, 'vim-slow', 'slow')
  call s:Check(s:WaitFor('index(s:Types("vim-slow"), "assistant") >= 0', 60000), 'slow run streams')
  call ch_sendexpr(ch, #{method: '$/cancelRequest', params: #{id: sent.id}})
  call s:Check(s:WaitFor('has_key(s:responses, "vim-slow")', 20000), 'cancelled pi/run answered')
  let err = get(get(s:responses, 'vim-slow', {}), 'error', {})
  call s:Eq(-32800, get(err, 'code', 0), 'error code of the cancelled run')
  call s:Eq('cancelled', get(get(err, 'data', {}), 'status', ''), 'data.status')
  call s:Eq('terminal.cancelled', get(s:Types('vim-slow'), -1, ''), 'the last message')
  call s:Eq([], get(get(get(err, 'data', {}), 'shutdown', {}), 'survivors', [0]), 'no survivors')

  let down = ch_evalexpr(ch, #{method: 'shutdown'}, #{timeout: 30000})
  call s:Check(has_key(down, 'result') && !has_key(down, 'error'), 'shutdown answered')
  call ch_sendexpr(ch, #{method: 'exit'})
  let s:job = job
  call s:Check(s:WaitFor('job_status(s:job) !=# "run"', 15000), 'the bridge exited after exit')
  if job_status(job) ==# 'run'
    call job_stop(job, 'kill')
  endif
endfunc

" The client in pi_bridge.vim: :PiRun after a run continues its conversation, :PiNew starts over.
func s:Conversation() abort
  let g:pi_bridge_cmd = [s:python, '-m', 'bridge', '--scripted-model']
  let g:pi_params = #{model: 'echo'}
  if isdirectory(s:repo . '/.tools/node_modules/.bin')
    let $PATH = s:repo . '/.tools/node_modules/.bin:' . $PATH
  endif
  execute 'source ' . fnameescape(s:repo . '/editors/vim/pi_bridge.vim')
  let s:st = PiBridgeState()
  let tag = localtime() . '-' . getpid()
  let turns = ['one-' . tag, 'two-' . tag, 'three-' . tag]
  let ids = []
  for prompt in turns[0:1]
    execute 'PiRun ' . prompt
    call add(ids, s:st.last)
    call s:Check(s:WaitFor('s:st.runs[s:st.last].done', 90000), ':PiRun ' . prompt . ' answered')
  endfor
  let first = s:st.runs[ids[0]]
  let second = s:st.runs[ids[1]]
  let sid = get(get(first.answer, 'result', {}), 'sessionId', '')
  call s:Check(!empty(sid), 'the first run has a session')
  call s:Eq(0, has_key(first.params, 'sessionId'), 'the first :PiRun starts a conversation')
  call s:Eq(sid, get(second.params, 'sessionId', ''), 'the second :PiRun continues it')
  call s:Eq(sid, get(get(second.answer, 'result', {}), 'sessionId', ''), 'in the same session')
  call s:Check(index(getbufline(second.buf, 1, '$'), 'ECHO:' . turns[1]) >= 0, 'the answer is in its buffer')
  let history = get(PiBridgeRequest('pi/session', #{sessionId: sid}), 'result', {})
  call s:Eq(turns[0:1], map(copy(get(history, 'turns', [])), 'v:val.prompt'), 'the session holds both turns')
  PiNew
  execute 'PiRun ' . turns[2]
  let third = s:st.runs[s:st.last]
  call s:Check(s:WaitFor('s:st.runs[s:st.last].done', 90000), ':PiRun after :PiNew answered')
  call s:Eq(0, has_key(third.params, 'sessionId'), ':PiNew: the next :PiRun starts a new conversation')
  let sid3 = get(get(third.answer, 'result', {}), 'sessionId', '')
  call s:Check(!empty(sid3) && sid3 !=# sid, 'a new session after :PiNew')
  call s:Unsent(tag)
  call PiBridgeStop()
  call s:Check(s:WaitFor('job_status(s:st.job) !=# "run"', 15000), 'the client bridge exited')
endfunc

" A steer, then :PiCancel before pi takes it: the steer comes back (the buffer, the command-line
" history) and the next :PiRun of the conversation answers its own prompt, with no steer in it.
func s:Unsent(tag) abort
  let g:pi_params = #{model: 'slow'}
  execute 'PiRun divide-' . a:tag
  let run = s:st.runs[s:st.last]
  call s:Check(s:WaitFor('!empty(filter(copy(s:st.runs[s:st.last].messages), "v:val.type ==# ''assistant''"))', 60000),
        \ 'the slow run streams')
  let steer = 'Focus on division by zero only ' . a:tag
  let steered = PiBridgeSteer(steer)
  call s:Eq(v:true, get(get(steered, 'result', {}), 'accepted', v:false), ':PiSteer is accepted')
  PiCancel
  call s:Check(s:WaitFor('s:st.runs[s:st.last].done', 30000), ':PiCancel answers the run')
  call s:Eq(-32800, get(get(run.answer, 'error', {}), 'code', 0), 'the run is cancelled')
  call s:Eq([steer], get(run, 'unsent', []), 'the steer comes back as unsent')
  call s:Check(index(getbufline(run.buf, 1, '$'), '-> not sent: ' . steer) >= 0, 'shown in the run buffer')
  call s:Eq('PiRun ' . steer, histget(':', -1), 'and one : + Up away')
  call s:Eq([], filter(copy(run.messages), 'v:val.type ==# "run.steered"'), 'pi never took the steer')
  let g:pi_params = #{model: 'echo'}
  execute 'PiRun again-' . a:tag
  let again = s:st.runs[s:st.last]
  call s:Check(s:WaitFor('s:st.runs[s:st.last].done', 60000), 'the next :PiRun answered')
  call s:Eq('ECHO:again-' . a:tag, get(get(again.answer, 'result', {}), 'text', ''), 'it answers its own prompt')
  call s:Eq([], filter(copy(again.messages), 'v:val.type ==# "run.steered"'), 'with no steer in it')
endfunc

" The test stands in for the user: g:PiBridgeTestAnswer(dialog) gets each dialog pi_bridge.vim
" would show (#{id, kind, title, lines, choices: [#{key, name, answer}], prefill?}) and answers
" #{key: 'd', message?} (a key of its choices), #{text: '...'}, #{dismiss: 1} (<Esc>), or {}: show
" the real dialog (a popup here; -es has +popupwin). s:replies is what the next dialogs answer;
" with none queued a dialog is dismissed, so an unexpected one never leaves a run waiting.
let s:asked = []
let s:replies = []
func s:Answerer(dialog) abort
  call add(s:asked, a:dialog)
  return empty(s:replies) ? #{dismiss: 1} : remove(s:replies, 0)
endfunc

func s:Of(run, type) abort
  return filter(copy(a:run.messages), 'v:val.type ==# a:type')
endfunc

" One :PiRun in the conversation of the last one; waits for its pi/run answer.
func s:PiRun(prompt) abort
  only   " each :PiRun opens a window and the -es screen is small
  execute 'PiRun ' . a:prompt
  let run = s:st.runs[s:st.last]
  call s:Check(s:WaitFor('s:st.runs[s:st.last].done', 90000), ':PiRun ' . a:prompt . ' answered')
  return run
endfunc

" Ask mode against real pi: deny, allow, always allow (then the rule answers), the rule removed
" with :PiPermissions, a run cancelled while its dialog is open, then :PiMode plan and full.
func s:Approvals() abort
  let s:work = tempname()
  call mkdir(s:work, 'p')
  let s:work = resolve(s:work)
  let $XDG_STATE_HOME = s:work . '/state'   " workspace rules go here, not in the user's state
  let workspace = s:work . '/project'
  call mkdir(workspace, 'p')
  let g:pi_bridge_init_options = #{defaultMode: 'ask'}
  let g:pi_params = #{model: 'tool', cwd: workspace}
  let g:PiBridgeTestAnswer = function('s:Answerer')
  PiNew

  let s:replies = [#{key: 'r', message: 'not in this repo'}]
  let run = s:PiRun('deny')
  let ask = get(s:asked, -1, #{kind: '', lines: [], choices: []})
  call s:Eq('permission', ask.kind, 'a tool call asks first')
  call s:Check(index(ask.lines, '  $ echo hi') >= 0, 'the dialog shows the command: ' . string(ask.lines))
  call s:Eq(['a', 'A', '3', 'd', 'D', 'r'], map(copy(ask.choices), 'v:val.key'), 'its options as keys')
  call s:Eq('completed', get(get(run.answer, 'result', {}), 'status', ''), 'the denied run completed')
  let failed = s:Of(run, 'tool.failed')
  call s:Eq(['denied'], map(copy(failed), 'get(v:val.content, "reason", "")'), 'tool.failed denied')
  call s:Check(!empty(failed) && stridx(failed[0].content.error, 'not in this repo') >= 0,
        \ 'the model is told why: ' . string(map(copy(failed), 'v:val.content.error')))
  call s:Eq([], s:Of(run, 'tool.completed'), 'nothing ran')
  call s:Eq([['reject', 'user']], map(s:Of(run, 'permission.resolved'),
        \ '[v:val.content.decision, v:val.content.by]'), 'permission.resolved')
  call s:Check(index(getbufline(run.buf, 1, '$'), '? reject (by user)') >= 0, 'the buffer shows the decision')

  let s:replies = [#{key: 'a'}]
  let run = s:PiRun('allow')
  call s:Eq(['hi'], map(s:Of(run, 'tool.completed'), 'trim(v:val.content.output)'), 'allowed: echo hi ran')
  call s:Eq([['allow', 'user']], map(s:Of(run, 'permission.resolved'),
        \ '[v:val.content.decision, v:val.content.by]'), 'allowed by the user')

  let s:replies = [#{key: 'A'}]
  let run = s:PiRun('always')
  call s:Eq(1, len(s:Of(run, 'tool.completed')), 'always allowed: it ran')
  let before = len(s:asked)
  let run = s:PiRun('again')
  call s:Eq(before, len(s:asked), 'the next identical call asks nothing')
  call s:Eq([['allow', 'rule']], map(s:Of(run, 'permission.resolved'),
        \ '[v:val.content.decision, v:val.content.by]'), 'the rule answers it')
  call s:Eq(1, len(s:Of(run, 'tool.completed')), 'and it ran')

  let s:replies = [#{key: '1'}]
  execute 'PiPermissions ' . fnameescape(workspace)
  let ask = get(s:asked, -1, #{kind: '', choices: []})
  call s:Eq('rules', ask.kind, ':PiPermissions lists the rules')
  call s:Check(len(ask.choices) == 1 && ask.choices[0].name =~# '^allow bash echo',
        \ 'the rule: ' . string(map(copy(ask.choices), 'v:val.name')))
  let left = PiBridgeRequest('pi/permissions', #{cwd: workspace})
  call s:Eq([], get(get(left, 'result', {}), 'rules', [0]), 'the rule picked is removed')

  " The real popup: a key that is no option leaves it open, an option's key answers.
  let s:replies = [{}]
  only
  execute 'PiRun popup'
  let s:run = s:st.runs[s:st.last]
  call s:Check(s:WaitFor('len(filter(values(s:st.dialogs), "has_key(v:val, ''winid'')")) == 1', 60000),
        \ 'a popup asks')
  let winid = values(s:st.dialogs)[0].winid
  call s:Check(index(getbufline(winbufnr(winid), 1, '$'), '  $ echo hi') >= 0, 'the popup shows the command')
  let Key = popup_getoptions(winid).filter
  call Key(winid, 'x')
  call s:Check(!empty(popup_getpos(winid)), 'a key that is no option leaves it open')
  call Key(winid, 'a')
  call s:Check(empty(popup_getpos(winid)), 'the key of Allow closes it')
  call s:Check(s:WaitFor('s:run.done', 60000), 'the popup run answered')
  call s:Eq(1, len(s:Of(s:run, 'tool.completed')), 'allowed from the popup: it ran')

  " A cancel while the dialog is open: $/cancelRequest from the bridge closes it, nothing answers.
  let s:replies = [{}]
  only
  execute 'PiRun cancel me'
  let s:run = s:st.runs[s:st.last]
  call s:Check(s:WaitFor('len(filter(values(s:st.dialogs), "has_key(v:val, ''winid'')")) == 1', 60000),
        \ 'a real popup asks')
  let winid = values(s:st.dialogs)[0].winid
  call s:Check(!empty(popup_getpos(winid)), 'the popup is open')
  PiCancel
  call s:Check(s:WaitFor('s:run.done', 20000), 'the cancelled run answered')
  call s:Eq(-32800, get(get(s:run.answer, 'error', {}), 'code', 0), 'error code of the cancelled run')
  call s:Check(s:WaitFor('empty(popup_getpos(' . winid . '))', 10000), '$/cancelRequest closed the popup')
  call s:Eq({}, s:st.dialogs, 'no dialog left')
  call s:Eq([], s:Of(s:run, 'tool.completed'), 'the cancelled call never ran')
  call s:Eq(['cancelled'], map(s:Of(s:run, 'permission.resolved'), 'v:val.content.decision'),
        \ 'permission.resolved cancelled')

  " An edit asks with the lines it would remove and add.
  call writefile(['line one', 'line two', 'line three'], workspace . '/notes.txt')
  let g:pi_params.model = 'edit'
  let s:replies = [#{key: 'a'}]
  let run = s:PiRun('edit')
  let g:pi_params.model = 'tool'
  let ask = get(s:asked, -1, #{lines: []})
  call s:Eq(['  - line two', '  + line 2, edited'], filter(copy(ask.lines), 'v:val =~# "^  [-+] "'),
        \ 'the edit dialog shows its -/+ lines: ' . string(ask.lines))
  call s:Check(get(ask.lines, 1, '') =~# 'notes\.txt$', 'and the file')
  call s:Eq(['line one', 'line 2, edited', 'line three'], readfile(workspace . '/notes.txt'), 'allowed: edited')

  call s:Eq(-32602, get(get(PiBridgeSetMode('bogus'), 'error', {}), 'code', 0), ':PiMode bogus is refused')
  PiMode plan
  let before = len(s:asked)
  let run = s:PiRun('plan')
  call s:Eq(before, len(s:asked), 'plan mode asks nothing')
  call s:Eq(['denied'], map(s:Of(run, 'tool.failed'), 'get(v:val.content, "reason", "")'), 'plan mode refuses')
  call s:Eq([['reject', 'mode']], map(s:Of(run, 'permission.resolved'),
        \ '[v:val.content.decision, v:val.content.by]'), 'refused by the mode')
  PiMode full
  let run = s:PiRun('full')
  call s:Eq(before, len(s:asked), 'full mode asks nothing')
  call s:Eq(1, len(s:Of(run, 'tool.completed')), 'full mode runs it')
  call PiBridgeStop()
  call s:Check(s:WaitFor('job_status(s:st.job) !=# "run"', 15000), 'the approvals bridge exited')
endfunc

" A user extension in pi's agent dir asks before bash with each of pi's dialogs and blocks the
" call with what it was told, so the answers come back in tool.failed's error.
let s:gate = [
      \ 'export default function (pi) {',
      \ '  pi.on("tool_call", async (event, ctx) => {',
      \ '    if (event.toolName !== "bash") return undefined;',
      \ '    ctx.ui.notify("asking before bash", "warning");',
      \ '    const ok = await ctx.ui.confirm("Run this command?", String(event.input.command));',
      \ '    const pick = await ctx.ui.select("Which way?", ["left", "right"]);',
      \ '    const why = await ctx.ui.input("Why?", "a reason");',
      \ '    const note = await ctx.ui.editor("Notes", "line one\nline two");',
      \ '    return { block: true, reason: "told " + JSON.stringify({ ok, pick, why, note }) };',
      \ '  });',
      \ '}']

func s:OnModelLine(ch, line) abort
  let s:model_lines += [a:line]
endfunc

" pi/ask: confirm, select, input and editor answered, then the same dismissed; notify is echoed.
func s:Dialogs() abort
  let agent_dir = s:work . '/agent'
  let s:model_lines = []
  let s:model = job_start([s:python, '-m', 'bridge.scripted_model', '--agent-dir', agent_dir], #{
        \ out_cb: function('s:OnModelLine'), err_io: 'null', cwd: s:repo})
  call s:Check(s:WaitFor('!empty(s:model_lines)', 30000), 'the scripted model is up')
  call mkdir(agent_dir . '/extensions', 'p')
  call writefile(s:gate, agent_dir . '/extensions/ask-gate.ts')
  let g:pi_bridge_cmd = [s:python, '-m', 'bridge']
  let g:pi_bridge_init_options = #{defaultMode: 'full', env: #{PI_CODING_AGENT_DIR: agent_dir}}
  let g:pi_params = #{provider: 'fake', model: 'tool', cwd: s:work . '/project'}
  PiNew

  " select and editor in their real UI: a popup_menu answered with its filter, a scratch buffer
  " answered with :write.
  let before = len(s:asked)
  let s:replies = [#{key: 'y'}, {}, #{text: 'because'}, {}]
  only
  execute 'PiRun dialogs'
  let s:run = s:st.runs[s:st.last]
  let open = 'len(filter(values(s:st.dialogs), "has_key(v:val, ''%s'')")) == 1'
  call s:Check(s:WaitFor(printf(open, 'winid'), 60000), 'select: a popup menu')
  let winid = values(s:st.dialogs)[0].winid
  call s:Eq(['1. left', '2. right'], getbufline(winbufnr(winid), 1, '$'), 'the menu lists the options')
  call popup_getoptions(winid).filter(winid, '2')
  call s:Check(s:WaitFor(printf(open, 'buf'), 30000), 'editor: a scratch buffer')
  let buf = values(s:st.dialogs)[0].buf
  call s:Eq(['line one', 'line two'], getbufline(buf, 1, '$'), 'it holds the prefill')
  execute 'buffer' buf
  call setline(1, ['edited', 'twice'])
  write
  call s:Check(s:WaitFor('s:run.done', 60000), 'the dialogs run answered')
  let run = s:run
  let asked = s:asked[before :]
  call s:Eq(['confirm', 'select', 'input', 'editor'], map(copy(asked), 'v:val.kind'), 'pi/ask kinds')
  call s:Eq(['Run this command?', 'echo hi'], get(asked, 0, #{lines: []}).lines, 'confirm shows title and message')
  call s:Eq(['left', 'right'], map(copy(get(asked, 1, #{choices: []}).choices), 'v:val.name'), 'select options')
  call s:Eq(['Why?', '(a reason)'], get(asked, 2, #{lines: []}).lines, 'input shows its placeholder')
  call s:Eq("line one\nline two", get(get(asked, 3, {}), 'prefill', ''), 'editor prefill')
  let failed = s:Of(run, 'tool.failed')
  call s:Eq(['told {"ok":true,"pick":"right","why":"because","note":"edited\ntwice"}'],
        \ map(copy(failed), 'v:val.content.error'), 'the extension got every answer')
  call s:Eq('completed', get(get(run.answer, 'result', {}), 'status', ''), 'the run completed')
  call s:Check(index(s:st.notices, #{type: 2, message: 'asking before bash'}) >= 0,
        \ 'notify is a warning window/showMessage: ' . string(s:st.notices))

  let before = len(s:asked)
  let s:replies = [#{dismiss: 1}, #{dismiss: 1}, #{dismiss: 1}, #{dismiss: 1}]
  let run = s:PiRun('dismissed')
  call s:Eq(4, len(s:asked) - before, 'four dialogs again')
  call s:Eq(['told {"ok":false}'], map(s:Of(run, 'tool.failed'), 'v:val.content.error'),
        \ 'dismissed: the extension got no answers')
  call s:Eq({}, s:st.dialogs, 'no dialog left')
  call PiBridgeStop()
  call s:Check(s:WaitFor('job_status(s:st.job) !=# "run"', 15000), 'the dialogs bridge exited')
  call job_stop(s:model)
  call s:Check(s:WaitFor('job_status(s:model) !=# "run"', 15000), 'the scripted model stopped')
endfunc

" :PiAgent against a bridge with two more agents: the fake pi (answers its `text` scenario at once)
" and one that is not installed. Each :PiRun names the agent picked; the answers are the agent's.
func s:Agents() abort
  let fake = #{command: [s:python, s:repo . '/tests/fakes/fake_pi.py'], protocol: 'pi'}
  let ghost = #{command: ['pi-bridge-no-such-agent', '--acp'], protocol: 'acp'}
  let g:pi_bridge_init_options = #{agents: #{fake: fake, ghost: ghost}}
  let g:pi_bridge_cmd = [s:python, '-m', 'bridge', '--scripted-model']
  let g:pi_params = #{model: 'text'}
  PiNew
  let names = getcompletion('PiAgent ', 'cmdline')
  call s:Check(index(names, 'fake') >= 0 && index(names, 'pi') >= 0 && index(names, 'ghost') < 0,
        \ ':PiAgent completes the found agents: ' . string(names))
  call s:Eq(['fake'], getcompletion('PiAgent fa', 'cmdline'), ':PiAgent completes a prefix')
  let ghost_entry = filter(copy(PiBridgeAgents()), 'v:val.name ==# "ghost"')
  call s:Eq([v:false], map(ghost_entry, 'v:val.found'), 'initialize lists the missing agent')
  silent! PiAgent ghost
  call s:Eq('', s:st.agent, 'a missing agent is not taken')
  PiAgent fake
  call s:Eq('fake', s:st.agent, ':PiAgent fake')
  let fake_text = 'Hello from the fake pi. It streams a few deltas.'
  let first = s:PiRun('which agent')
  let second = s:PiRun('still that one')
  call s:Eq(['fake', 'fake'], [get(first.params, 'agent', ''), get(second.params, 'agent', '')],
        \ 'each :PiRun names the agent')
  call s:Eq([fake_text, fake_text], map([first, second], 'get(get(v:val.answer, "result", {}), "text", "")'),
        \ 'the fake pi answered both')
  let sid = get(get(first.answer, 'result', {}), 'sessionId', '')
  call s:Eq(sid, get(second.params, 'sessionId', ''), 'the second continues the conversation')
  PiAgent pi
  call s:Eq('', s:st.session, 'another agent: a new conversation')
  let g:pi_params = #{model: 'echo'}
  let third = s:PiRun('back to pi')
  call s:Eq('pi', get(third.params, 'agent', ''), 'the run names pi')
  call s:Eq('ECHO:back to pi', get(get(third.answer, 'result', {}), 'text', ''), 'pi answered')
  call PiBridgeStop()
  call s:Check(s:WaitFor('job_status(s:st.job) !=# "run"', 15000), 'the agents bridge exited')
endfunc

try
  call s:Main()
  call s:Conversation()
  call s:Approvals()
  call s:Dialogs()
  call s:Agents()
catch
  let s:failed += 1
  call s:Out('FAIL exception: ' . v:exception . ' at ' . v:throwpoint)
endtry
call s:Out(printf('%d passed, %d failed', s:passed, s:failed))
call setline(1, s:output)
%print
if s:failed > 0
  cquit 1
endif
qall!
