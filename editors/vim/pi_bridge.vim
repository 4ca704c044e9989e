" pi-bridge from Vim 9 through its built-in LSP channel: `:source` this file (or put it in
" ~/.vim/plugin/), with `pi-bridge` and `pi` on PATH.
"
"   :PiRun {prompt}  ask pi; the answer streams into a scratch buffer. After a run, the next
"                    :PiRun continues the same conversation (pi session).
"   :PiNew           start over: the next :PiRun starts a new conversation.
"   :PiCancel        stop the running run ($/cancelRequest; the bridge stops pi's whole tree).
"
" g:pi_bridge_cmd    how to start the bridge (argv list; default ['pi-bridge']).
" g:pi_params        extra pi/run params, e.g. #{provider: 'anthropic', model: 'claude-sonnet-4-5'}.
if exists('g:loaded_pi_bridge_vim')
  finish
endif
let g:loaded_pi_bridge_vim = 1

" s:state.session: the session the next :PiRun continues ('' = a new one); .runs: runId -> run.
let s:state = #{job: v:null, ch: v:null, session: '', runs: {}, last: '', count: 0, generation: 0}

func s:OnMessage(ch, msg) abort
  if get(a:msg, 'method', '') !=# 'pi/message' | return | endif
  let m = a:msg.params
  let run = get(s:state.runs, m.runId, {})
  if empty(run) | return | endif
  let buf = run.buf
  let c = m.content
  if m.type ==# 'session.started' || m.type ==# 'session.resumed'
    let run.session = c.sessionId
    if run.generation == s:state.generation
      let s:state.session = c.sessionId   " known from the start: a :PiRun now continues it too
    endif
  elseif m.type ==# 'assistant'          " a delta: continue the last line
    let lines = split(c.text, "\n", 1)
    call setbufline(buf, '$', getbufline(buf, '$')[0] . lines[0])
    call appendbufline(buf, '$', lines[1:])
  elseif m.type ==# 'tool.call'
    call appendbufline(buf, '$', ['[' . c.name . '] ' . json_encode(c.arguments), ''])
  elseif m.type ==# 'run.steered'
    call appendbufline(buf, '$', ['-> steered: ' . c.text, ''])
  elseif m.type =~# '^terminal\.'
    let run.status = m.type[9:]   " run.done is set by the pi/run answer (s:OnAnswer)
    call appendbufline(buf, '$', ['-- ' . run.status])
  endif
endfunc

" The pi/run answer: the session of a finished run is the one the next :PiRun continues.
func s:OnAnswer(run_id, ch, resp) abort
  let run = s:state.runs[a:run_id]
  let run.answer = a:resp
  let data = has_key(a:resp, 'result') ? a:resp.result : get(get(a:resp, 'error', {}), 'data', {})
  let session = get(data, 'sessionId', get(run, 'session', ''))
  if type(session) == v:t_string && !empty(session) && run.generation == s:state.generation
    let s:state.session = session
  endif
  let run.done = 1
endfunc

func s:Channel() abort
  if s:state.job isnot v:null && job_status(s:state.job) ==# 'run'
    return s:state.ch
  endif
  let s:state.job = job_start(get(g:, 'pi_bridge_cmd', ['pi-bridge']), #{
        \ in_mode: 'lsp', out_mode: 'lsp', err_io: 'null', noblock: 1,
        \ callback: function('s:OnMessage')})
  let s:state.ch = job_getchannel(s:state.job)
  call ch_evalexpr(s:state.ch, #{method: 'initialize', params: #{processId: getpid(),
        \ rootUri: v:null, capabilities: {}, initializationOptions: {}}}, #{timeout: 30000})
  call ch_sendexpr(s:state.ch, #{method: 'initialized', params: {}})
  return s:state.ch
endfunc

func PiBridgeRun(prompt) abort
  let ch = s:Channel()
  let s:state.count += 1
  let id = 'vim-' . getpid() . '-' . localtime() . '-' . s:state.count
  new | setlocal buftype=nofile bufhidden=hide noswapfile
  call setline(1, ['pi > ' . a:prompt, ''])
  let params = extend(#{prompt: a:prompt, runId: id}, get(g:, 'pi_params', {}))
  if !empty(s:state.session)
    let params.sessionId = s:state.session   " a follow-up: the same conversation
  endif
  let s:state.runs[id] = #{buf: bufnr(), done: 0, params: params, generation: s:state.generation}
  let s:state.last = id
  let b:pi_request = ch_sendexpr(ch, #{method: 'pi/run', params: params},
        \ #{callback: function('s:OnAnswer', [id])}).id
  return id
endfunc

func PiBridgeNew() abort
  let s:state.session = ''
  let s:state.generation += 1    " a run still going no longer sets the session
endfunc

" The client's state (for tests and statuslines): session, runs, last.
func PiBridgeState() abort
  return s:state
endfunc

" A request on the bridge's channel, answered synchronously.
func PiBridgeRequest(method, params) abort
  return ch_evalexpr(s:Channel(), #{method: a:method, params: a:params}, #{timeout: 30000})
endfunc

func PiBridgeStop() abort
  if s:state.job is v:null || job_status(s:state.job) !=# 'run' | return | endif
  call ch_evalexpr(s:state.ch, #{method: 'shutdown'}, #{timeout: 30000})
  call ch_sendexpr(s:state.ch, #{method: 'exit'})
endfunc

command! -nargs=+ PiRun call PiBridgeRun(<q-args>)
command! PiNew call PiBridgeNew()
command! PiCancel call ch_sendexpr(s:Channel(), #{method: '$/cancelRequest', params: #{id: b:pi_request}})
