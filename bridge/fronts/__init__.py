"""What editors speak: the LSP-style pi/* front, the ACP front, and their one lifecycle."""
