"""The start-up baseline: a minimal pygls server that only answers `initialize` (and shutdown/exit)."""

from __future__ import annotations

from pygls.lsp.server import LanguageServer


def main() -> None:
    LanguageServer("pygls-minimal", "0").start_io()


if __name__ == "__main__":
    main()
