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
" Prints `N passed, M failed`.

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
  call PiBridgeStop()
  call s:Check(s:WaitFor('job_status(s:st.job) !=# "run"', 15000), 'the client bridge exited')
endfunc

try
  call s:Main()
  call s:Conversation()
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
