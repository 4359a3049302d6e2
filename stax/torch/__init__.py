"""The optional PyTorch front end: graph capture, the aten op table, FX rewrites and the torch.compile backend."""
