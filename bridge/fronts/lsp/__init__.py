"""The LSP-style front: pygls handlers of the pi/* methods, the frame reader and writer."""
