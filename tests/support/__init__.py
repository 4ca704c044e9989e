"""What the tests share, by job: env (paths, markers, leak tags), lsp (the pytest-lsp client),
raw (the raw-pipe bridge client), acp (the ACP SDK client and a raw ACP peer), leaks (the
run-process leak search), streams (message stream assertions), model_requests (what the
scripted model was sent)."""
