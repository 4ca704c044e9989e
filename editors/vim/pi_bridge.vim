" pi-bridge from Vim 9 through its built-in LSP channel: `:source` this file (or put it in
" ~/.vim/plugin/), with `pi-bridge` and `pi` on PATH.
"
"   :PiRun {prompt}  ask pi; the answer streams into a scratch buffer. After a run, the next
"                    :PiRun continues the same conversation (pi session).
"   :PiNew           start over: the next :PiRun starts a new conversation.
"   :PiCancel        stop the running run ($/cancelRequest; the bridge stops pi's whole tree).
"                    What never reached the model (steers, queued prompts) comes back: shown in
"                    the run's buffer and put in the command-line history as `:PiRun {text}`.
"   :PiSteer {text}  steer the running run (pi/steer): pi takes it before its next model call.
"   :PiAgent {name}  the agent of the conversation (pi, claude, an ACP agent: any the bridge's
"                    initialize lists; <Tab> completes the found ones), named by each :PiRun.
"                    Another agent once the conversation has a session starts a new one.
"   :PiMode {mode}   ask | auto-edit | plan | full: the current conversation's mode, from its
"                    next tool call (pi/setMode).
"   :PiPermissions [dir]  the saved rules of a workspace (default: the current directory); pick
"                    one to remove it.
"
" Before a tool call runs, pi asks (pi/requestPermission): a dialog shows the command or the lines
" an edit would add and remove, and the bridge's options as keys (a Allow, A Always allow, d Deny,
" D Always deny; Esc: no answer, the call does not run). The agent's own questions (pi/ask:
" select, confirm, input, editor) are answered the same way, and its notices are echoed.
"
" g:pi_bridge_cmd    how to start the bridge (argv list; default ['pi-bridge']).
" g:pi_params        extra pi/run params, e.g. #{provider: 'anthropic', model: 'claude-sonnet-4-5'}.
" g:pi_bridge_init_options  initializationOptions, e.g. #{defaultMode: 'auto-edit'}.
if exists('g:loaded_pi_bridge_vim')
  finish
endif
let g:loaded_pi_bridge_vim = 1

" s:state.session: the session the next :PiRun continues ('' = a new one); .runs: runId -> run.
" .dialogs: request id -> a dialog open for the bridge; .notices: the last window/showMessage.
" .agent: the agent :PiAgent picked ('' = the bridge's default); .bridge: initialize's piBridge.
let s:state = #{job: v:null, ch: v:null, session: '', runs: {}, last: '', count: 0, generation: 0,
      \ dialogs: {}, notices: [], mode: '', agent: '', bridge: {}}

func s:OnMessage(ch, msg) abort
  let method = get(a:msg, 'method', '')
  if has_key(a:msg, 'id') && !empty(method)
    call s:OnRequest(a:ch, a:msg)
    return
  elseif method ==# '$/cancelRequest'
    call s:Withdraw(get(get(a:msg, 'params', {}), 'id', v:null))
    return
  elseif method ==# 'window/showMessage'
    call s:ShowMessage(get(a:msg, 'params', {}))
    return
  elseif method !=# 'pi/message'
    return
  endif
  let m = a:msg.params
  let run = get(s:state.runs, m.runId, {})
  if empty(run) | return | endif
  call add(run.messages, m)
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
  elseif m.type ==# 'permission.requested'
    call appendbufline(buf, '$', ['? asks: ' . c.title])
  elseif m.type ==# 'permission.resolved'
    call appendbufline(buf, '$', ['? ' . c.decision . ' (by ' . c.by . ')', ''])
  elseif m.type ==# 'tool.failed'
    call appendbufline(buf, '$', ['[' . get(c, 'reason', 'failed') . '] ' . get(c, 'error', ''), ''])
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
  let unsent = get(data, 'unsent', [])
  if type(unsent) == v:t_list && !empty(unsent)
    call s:GiveBack(run, unsent)
  endif
  let run.done = 1
endfunc

" A stopped run's messages that never reached the model: shown, and one `:` + Up away.
func s:GiveBack(run, texts) abort
  let a:run.unsent = a:texts
  call appendbufline(a:run.buf, '$', map(copy(a:texts), '"-> not sent: " . v:val'))
  for text in a:texts
    call histadd(':', 'PiRun ' . text)
  endfor
  echomsg printf('pi-bridge: %d message(s) not sent; :PiRun history has them', len(a:texts))
endfunc

" :PiSteer {text}: a steering message for the last run, while it runs.
func PiBridgeSteer(text) abort
  let resp = PiBridgeRequest('pi/steer', #{runId: s:state.last, message: a:text})
  let result = get(resp, 'result', {})
  if get(result, 'accepted', v:false)
    call appendbufline(s:state.runs[s:state.last].buf, '$', ['-> steering: ' . a:text])
  else
    call s:Error(get(result, 'reason', get(get(resp, 'error', {}), 'message', 'pi/steer failed')))
  endif
  return resp
endfunc

" Requests from the bridge: approvals (pi/requestPermission) and the agent's own dialogs (pi/ask).
" Each becomes a dialog: #{id, kind, title, lines (what is shown), choices ([#{key, name,
" answer}]), dismiss (the answer of <Esc>), prefill (input/editor)}, kept in s:state.dialogs until
" it is answered or the bridge withdraws it ($/cancelRequest): it is answered at most once.
let s:option_keys = #{allow_once: 'a', allow_always: 'A', reject_once: 'd', reject_always: 'D'}

" Vim's ch_sendexpr() only takes numeric ids and the bridge's are strings: frame the answer here.
func s:Send(msg) abort
  if s:state.ch is v:null || ch_status(s:state.ch) !=# 'open' | return | endif
  let body = json_encode(extend(#{jsonrpc: '2.0'}, a:msg))
  call ch_sendraw(s:state.ch, 'Content-Length: ' . strlen(body) . "\r\n\r\n" . body)
endfunc

func s:OnRequest(ch, msg) abort
  let p = get(a:msg, 'params', {})
  let p = type(p) == v:t_dict ? p : {}
  if a:msg.method ==# 'pi/requestPermission'
    let dialog = #{id: a:msg.id, kind: 'permission', dismiss: #{outcome: 'cancelled'}}
  elseif a:msg.method ==# 'pi/ask'
    let dialog = #{id: a:msg.id, kind: '', dismiss: #{cancelled: v:true}}
  else
    call s:Send(#{id: a:msg.id, error: #{code: -32601, message: 'not handled: ' . a:msg.method}})
    return
  endif
  try
    call extend(dialog, a:msg.method ==# 'pi/ask' ? s:AskDialog(p) : s:PermissionDialog(p))
    call s:Open(dialog)
  catch
    " a request that cannot be shown is answered "no answer" at once: nothing waits on it
    let s:state.dialogs[dialog.id] = dialog
    call s:Answer(dialog, dialog.dismiss)
    call s:Error(a:msg.method . ': ' . v:exception)
  endtry
endfunc

" The lines that show one approval: the tool and its title, the command, or for a file change
" the lines it would remove (-) and add (+).
func PiBridgeDescribe(p) abort
  let lines = [printf('pi asks to run %s: %s', get(a:p, 'tool', '?'), get(a:p, 'title', ''))]
  let diff = get(a:p, 'diff', v:null)
  let input = get(a:p, 'input', {})
  if type(diff) == v:t_dict
    call add(lines, '  ' . get(diff, 'path', ''))
    let old = type(get(diff, 'oldText')) == v:t_string ? split(diff.oldText, "\n") : []
    let new = type(get(diff, 'newText')) == v:t_string ? split(diff.newText, "\n") : []
    let left = {}
    for line in old
      let left[line] = get(left, line, 0) + 1
    endfor
    let added = []
    for line in new
      if get(left, line, 0) > 0
        let left[line] -= 1
      else
        call add(added, '  + ' . line)
      endif
    endfor
    let changes = []
    for line in old
      if get(left, line, 0) > 0
        let left[line] -= 1
        call add(changes, '  - ' . line)
      endif
    endfor
    let changes += added
    let shown = 40
    call extend(lines, changes[: shown - 1])
    if len(changes) > shown
      call add(lines, printf('  ... %d more', len(changes) - shown))
    endif
  elseif type(get(a:p, 'command')) == v:t_string
    " The whole command (the title may be cut), every line of it.
    call extend(lines, map(split(a:p.command, "\n"), '"  $ " . v:val'))
  elseif type(input) == v:t_dict && type(get(input, 'command')) == v:t_string
    call extend(lines, map(split(input.command, "\n"), '"  $ " . v:val'))
  endif
  return lines
endfunc

func s:PermissionDialog(p) abort
  let choices = []
  let used = {}
  let n = 0
  for option in type(get(a:p, 'options')) == v:t_list ? a:p.options : []
    let n += 1
    if type(option) != v:t_dict || type(get(option, 'optionId')) != v:t_string | continue | endif
    let key = get(s:option_keys, get(option, 'kind', ''), string(n))
    let key = has_key(used, key) ? string(n) : key
    let used[key] = 1
    call add(choices, #{key: key, name: get(option, 'name', option.optionId),
          \ answer: #{optionId: option.optionId}})
    if get(option, 'kind', '') ==# 'reject_once'
      let reason = #{key: 'r', name: 'Deny, saying why', answer: #{optionId: option.optionId}, why: 1}
    endif
  endfor
  if exists('reason') && !has_key(used, 'r')
    call add(choices, reason)   " the reason goes to the model with the refusal
  endif
  return #{kind: 'permission', title: 'pi asks', lines: PiBridgeDescribe(a:p), choices: choices,
        \ dismiss: #{outcome: 'cancelled'}}
endfunc

func s:AskDialog(p) abort
  let kind = get(a:p, 'kind', '')
  let lines = [get(a:p, 'title', 'pi asks')]
  if type(get(a:p, 'message')) == v:t_string
    call extend(lines, split(a:p.message, "\n"))
  endif
  let timeout = get(a:p, 'timeoutMs')
  if type(timeout) == v:t_number && timeout > 0
    call add(lines, printf('(no answer in %d s counts as none)', (timeout + 999) / 1000))
  endif
  let dialog = #{kind: kind, title: 'pi asks', lines: lines, choices: [],
        \ dismiss: #{cancelled: v:true}}
  if kind ==# 'confirm'
    let dialog.choices = [#{key: 'y', name: 'Yes', answer: #{confirmed: v:true}},
          \ #{key: 'n', name: 'No', answer: #{confirmed: v:false}}]
  elseif kind ==# 'select'
    let n = 0
    for option in type(get(a:p, 'options')) == v:t_list ? a:p.options : []
      let n += 1
      call add(dialog.choices, #{key: n < 10 ? string(n) : '', name: option, answer: #{value: option}})
    endfor
  elseif kind ==# 'input' || kind ==# 'editor'
    let dialog.prefill = type(get(a:p, 'prefill')) == v:t_string ? a:p.prefill : ''
    if type(get(a:p, 'placeholder')) == v:t_string && !empty(a:p.placeholder)
      call add(dialog.lines, '(' . a:p.placeholder . ')')
    endif
  endif
  return dialog
endfunc

func s:Open(dialog) abort
  let s:state.dialogs[a:dialog.id] = a:dialog
  if exists('g:PiBridgeTestAnswer')
    let typed = g:PiBridgeTestAnswer(a:dialog)
    if !empty(typed)
      return s:Typed(a:dialog, typed)
    endif
  endif
  let text = a:dialog.kind ==# 'input' || a:dialog.kind ==# 'editor'
  if text
    " input() and a new window wait for the user: not inside the channel callback
    call timer_start(0, function(a:dialog.kind ==# 'editor' ? 's:EditorBuffer' : 's:Input', [a:dialog]))
  elseif empty(a:dialog.choices)
    call s:Answer(a:dialog, a:dialog.dismiss)
  elseif has('popupwin')
    call s:Popup(a:dialog)
  else
    call timer_start(0, function('s:Confirm', [a:dialog]))
  endif
endfunc

" What the user did, as #{key} (a choice's key, with an optional reject message), #{text} or
" #{dismiss: 1}.
func s:Typed(dialog, typed) abort
  if has_key(a:typed, 'key')
    call s:Choose(a:dialog, s:KeyIndex(a:dialog, a:typed.key), get(a:typed, 'message', ''))
  elseif has_key(a:typed, 'text')
    call s:Answer(a:dialog, #{value: a:typed.text})
  else
    call s:Answer(a:dialog, a:dialog.dismiss)
  endif
endfunc

func s:KeyIndex(dialog, key) abort
  let i = 0
  for choice in a:dialog.choices
    if !empty(choice.key) && choice.key ==# a:key
      return i
    endif
    let i += 1
  endfor
  return -1
endfunc

func s:Choose(dialog, index, ...) abort
  if a:index < 0 || a:index >= len(a:dialog.choices)
    return s:Answer(a:dialog, a:dialog.dismiss)
  endif
  let choice = a:dialog.choices[a:index]
  let answer = copy(choice.answer)
  if a:0 && !empty(a:1) && has_key(answer, 'optionId')
    let answer.message = a:1
  elseif get(choice, 'why', 0)
    " inputdialog() waits for the user: not inside the popup's callback
    return timer_start(0, function('s:Why', [a:dialog, answer]))
  endif
  call s:Answer(a:dialog, answer)
endfunc

func s:Why(dialog, answer, ...) abort
  if !has_key(s:state.dialogs, a:dialog.id) | return | endif
  let cancelled = "\x01"
  let why = inputdialog('Why not? (told to the model): ', '', cancelled)
  if why ==# cancelled
    return s:Answer(a:dialog, a:dialog.dismiss)
  endif
  call s:Answer(a:dialog, empty(why) ? a:answer : extend(a:answer, #{message: why}))
endfunc

" Answer once, and never a request the bridge has withdrawn.
func s:Answer(dialog, answer) abort
  if !has_key(s:state.dialogs, a:dialog.id) | return | endif
  call remove(s:state.dialogs, a:dialog.id)
  if has_key(a:dialog, 'Done')
    call a:dialog.Done(a:answer)
  else
    call s:Send(#{id: a:dialog.id, result: a:answer})
  endif
endfunc

" The bridge is gone: nothing can answer its dialogs any more.
func s:OnClose(ch) abort
  for id in keys(s:state.dialogs)
    call s:Withdraw(id)
  endfor
endfunc

" $/cancelRequest from the bridge: the run was cancelled, or the dialog timed out. Close it and
" answer nothing.
func s:Withdraw(id) abort
  if (type(a:id) != v:t_string && type(a:id) != v:t_number) || !has_key(s:state.dialogs, a:id)
    return
  endif
  let dialog = remove(s:state.dialogs, a:id)
  if has_key(dialog, 'winid')
    call popup_close(dialog.winid)
  endif
  if has_key(dialog, 'buf') && bufexists(dialog.buf)
    execute 'bwipeout!' dialog.buf
  endif
endfunc

func s:Popup(dialog) abort
  let options = #{title: ' ' . a:dialog.title . ' ', mapping: 0,
        \ filter: function('s:PopupKey', [a:dialog]), callback: function('s:PopupClosed', [a:dialog])}
  if a:dialog.kind ==# 'select' || a:dialog.kind ==# 'rules'
    let items = map(copy(a:dialog.choices), '(empty(v:val.key) ? "   " : v:val.key . ". ") . v:val.name')
    let options.title = ' ' . join(a:dialog.lines, ' ') . ' '
    let a:dialog.winid = popup_menu(items, options)
  else
    let keys = map(copy(a:dialog.choices), '"[" . v:val.key . "] " . v:val.name')
    let a:dialog.winid = popup_dialog(a:dialog.lines + ['', join(keys, '  ') . '  [Esc] no answer'],
          \ extend(options, #{padding: [0, 1, 0, 1]}))
  endif
endfunc

func s:PopupKey(dialog, winid, key) abort
  let i = s:KeyIndex(a:dialog, a:key)
  if i >= 0
    call popup_close(a:winid, i + 1)
  elseif a:dialog.kind ==# 'select' || a:dialog.kind ==# 'rules'
    return popup_filter_menu(a:winid, a:key)
  elseif a:key ==# "\<Esc>" || a:key ==# "\<C-C>"
    call popup_close(a:winid, -1)
  endif
  return 1
endfunc

" popup_menu() and the filter above close with the 1-based choice; -1 (or 0) is no choice.
func s:PopupClosed(dialog, winid, result) abort
  call s:Choose(a:dialog, a:result - 1)
endfunc

" Without popups: confirm() / inputlist(), each choice with its own accelerator.
func s:Confirm(dialog, ...) abort
  if !has_key(s:state.dialogs, a:dialog.id) | return | endif
  if a:dialog.kind ==# 'select' || a:dialog.kind ==# 'rules'
    let items = map(copy(a:dialog.choices), '(v:key + 1) . ". " . v:val.name')
    return s:Choose(a:dialog, inputlist([join(a:dialog.lines, ' ')] + items) - 1)
  endif
  let used = {}
  let labels = []
  for choice in a:dialog.choices
    let chars = split(choice.name, '\zs')
    let at = 0
    while at < len(chars) && (chars[at] !~# '[[:alnum:]]' || has_key(used, tolower(chars[at])))
      let at += 1
    endwhile
    if at < len(chars)
      let used[tolower(chars[at])] = 1
      call insert(chars, '&', at)
    endif
    call add(labels, join(map(chars, {i, c -> c ==# '&' && i != at ? '&&' : c}), ''))
  endfor
  call s:Choose(a:dialog, confirm(join(a:dialog.lines, "\n"), join(labels, "\n"), 0) - 1)
endfunc

func s:Input(dialog, ...) abort
  if !has_key(s:state.dialogs, a:dialog.id) | return | endif
  let cancelled = "\x01"
  let text = inputdialog(join(a:dialog.lines, ' ') . ': ', a:dialog.prefill, cancelled)
  call s:Answer(a:dialog, text ==# cancelled ? a:dialog.dismiss : #{value: text})
endfunc

" The editor dialog: a scratch buffer with the prefill; :w answers its text, closing it unwritten
" answers cancelled.
func s:EditorBuffer(dialog, ...) abort
  if !has_key(s:state.dialogs, a:dialog.id) | return | endif
  new
  setlocal buftype=acwrite bufhidden=wipe noswapfile
  execute 'file' fnameescape('pi-answer://' . a:dialog.id)
  call setline(1, split(a:dialog.prefill, "\n", 1))
  setlocal nomodified
  let b:pi_dialog = a:dialog
  let a:dialog.buf = bufnr()
  autocmd BufWriteCmd <buffer> call s:Answer(b:pi_dialog, #{value: join(getline(1, '$'), "\n")})
        \ | setlocal nomodified
  autocmd BufWipeout <buffer> call s:Answer(getbufvar(str2nr(expand('<abuf>')), 'pi_dialog'),
        \ getbufvar(str2nr(expand('<abuf>')), 'pi_dialog').dismiss)
  echo join(a:dialog.lines, ' ') . '  (:w answers, :q! cancels)'
endfunc

" window/showMessage (the agent's notify): echoed with the highlight of its type.
func s:ShowMessage(p) abort
  let type = get(a:p, 'type', 3)
  let text = 'pi: ' . get(a:p, 'message', '')
  call add(s:state.notices, #{type: type, message: get(a:p, 'message', '')})
  if len(s:state.notices) > 100 | call remove(s:state.notices, 0) | endif
  execute 'echohl' type == 1 ? 'ErrorMsg' : type == 2 ? 'WarningMsg' : 'None'
  echomsg text
  echohl None
endfunc

func s:Error(text) abort
  echohl ErrorMsg | echomsg 'pi-bridge: ' . a:text | echohl None
endfunc

" :PiMode {mode}: the conversation's mode from its next tool call (a running run's included);
" before any conversation, the mode of the next :PiRun.
func PiBridgeSetMode(mode) abort
  if empty(s:state.session)
    let s:state.mode = a:mode
    echomsg 'pi-bridge: the next :PiRun starts in mode ' . a:mode
    return {}
  endif
  let resp = PiBridgeRequest('pi/setMode', #{sessionId: s:state.session, mode: a:mode})
  if has_key(resp, 'result')
    echomsg 'pi-bridge: mode ' . resp.result.mode
  else
    call s:Error(get(get(resp, 'error', {}), 'message', 'pi/setMode failed'))
  endif
  return resp
endfunc

" The agents a run can name (initialize's `agents`: name, found, command, protocol, version).
func PiBridgeAgents() abort
  call s:Channel()
  return get(s:state.bridge, 'agents', [])
endfunc

" :PiAgent {name}: the agent of the next :PiRun and of its conversation. A missing or unknown one
" is refused with why. The bridge refuses a run naming another agent than its session's, so a
" conversation that has a session goes on with the old agent only: another one starts anew.
func PiBridgeSetAgent(name) abort
  let found = filter(copy(PiBridgeAgents()), 'v:val.name ==# a:name')
  if empty(found)
    call s:Error('no agent named ' . a:name)
    return 0
  elseif !get(found[0], 'found', v:false)
    call s:Error('agent ' . a:name . ' is not found: ' . join(get(found[0], 'command', []), ' '))
    return 0
  endif
  let current = empty(s:state.agent) ? get(s:state.bridge, 'defaultAgent', 'pi') : s:state.agent
  if a:name !=# current && !empty(s:state.session)
    call PiBridgeNew()
    echomsg 'pi-bridge: agent ' . a:name . ': the next :PiRun starts a new conversation'
  else
    echomsg 'pi-bridge: agent ' . a:name
  endif
  let s:state.agent = a:name
  return 1
endfunc

func s:AgentNames(lead, ...) abort
  let found = filter(copy(PiBridgeAgents()), 'get(v:val, "found", v:false)')
  return filter(map(found, 'v:val.name'), 'stridx(v:val, a:lead) == 0')
endfunc

func s:Modes(...) abort
  return ['ask', 'auto-edit', 'plan', 'full']
endfunc

func s:RuleText(rule) abort
  let match = get(a:rule, 'match', {})
  " A rule shown as wide as it is: a prefix rule ends ` *`, an exact one does not.
  let what = has_key(match, 'command') ? join(match.command, ' ')
        \ : has_key(match, 'commandPrefix') ? join(match.commandPrefix, ' ') . ' *'
        \ : get(match, 'path', '')
  return printf('%s %s %s (%s)', a:rule.decision, a:rule.tool, what, a:rule.scope)
endfunc

" :PiPermissions [dir]: the workspace's rules; the one picked is removed (pi/setPermissions).
func PiBridgePermissions(...) abort
  let cwd = fnamemodify(a:0 && !empty(a:1) ? a:1 : getcwd(), ':p')
  let cwd = len(cwd) > 1 ? substitute(cwd, '/\+$', '', '') : cwd
  let resp = PiBridgeRequest('pi/permissions', #{cwd: cwd})
  if !has_key(resp, 'result')
    return s:Error(get(get(resp, 'error', {}), 'message', 'pi/permissions failed'))
  endif
  let rules = resp.result.rules
  if empty(rules)
    echomsg 'pi-bridge: no permission rules for ' . cwd
    return
  endif
  let s:state.count += 1
  let choices = []
  for rule in rules
    call add(choices, #{key: len(choices) < 9 ? string(len(choices) + 1) : '', name: s:RuleText(rule),
          \ answer: #{remove: rule.id}})
  endfor
  call s:Open(#{id: 'rules-' . s:state.count, kind: 'rules', title: 'pi-bridge rules',
        \ lines: ['Remove which rule of ' . cwd . '?'], choices: choices, dismiss: {},
        \ Done: function('s:RemoveRule', [cwd, rules])})
endfunc

func s:RemoveRule(cwd, rules, answer) abort
  if !has_key(a:answer, 'remove') | return | endif
  let kept = filter(copy(a:rules), 'v:val.id !=# a:answer.remove')
  let resp = PiBridgeRequest('pi/setPermissions', #{cwd: a:cwd, rules: kept})
  if has_key(resp, 'result')
    echomsg 'pi-bridge: rule removed; ' . len(resp.result.rules) . ' left'
  else
    call s:Error(get(get(resp, 'error', {}), 'message', 'pi/setPermissions failed'))
  endif
endfunc

func s:Channel() abort
  if s:state.job isnot v:null && job_status(s:state.job) ==# 'run'
    return s:state.ch
  endif
  let s:state.job = job_start(get(g:, 'pi_bridge_cmd', ['pi-bridge']), #{
        \ in_mode: 'lsp', out_mode: 'lsp', err_io: 'null', noblock: 1,
        \ callback: function('s:OnMessage'), close_cb: function('s:OnClose')})
  let s:state.ch = job_getchannel(s:state.job)
  " piBridge: this client answers pi/requestPermission and pi/ask (its conversations start in
  " ask mode unless initializationOptions.defaultMode says otherwise).
  let capabilities = #{experimental: #{piBridge: #{permissions: v:true, questions: v:true}}}
  let init = ch_evalexpr(s:state.ch, #{method: 'initialize', params: #{processId: getpid(),
        \ rootUri: v:null, capabilities: capabilities,
        \ initializationOptions: get(g:, 'pi_bridge_init_options', {})}}, #{timeout: 30000})
  let s:state.bridge = get(get(get(get(init, 'result', {}), 'capabilities', {}), 'experimental', {}),
        \ 'piBridge', {})
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
  if !empty(s:state.agent)
    let params.agent = s:state.agent   " :PiAgent's pick
  endif
  if !empty(s:state.mode)
    let params.mode = s:state.mode   " a :PiMode given before the conversation started
    let s:state.mode = ''
  endif
  let s:state.runs[id] = #{buf: bufnr(), done: 0, params: params, generation: s:state.generation,
        \ messages: []}
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
command! -nargs=+ PiSteer call PiBridgeSteer(<q-args>)
command! PiCancel call ch_sendexpr(s:Channel(), #{method: '$/cancelRequest', params: #{id: b:pi_request}})
command! -nargs=1 -complete=customlist,s:AgentNames PiAgent call PiBridgeSetAgent(<q-args>)
command! -nargs=1 -complete=customlist,s:Modes PiMode call PiBridgeSetMode(<q-args>)
command! -nargs=? -complete=dir PiPermissions call PiBridgePermissions(<q-args>)
