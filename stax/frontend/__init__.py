"""The front end: proxy tensors with torch-style methods and tracing to a graph (stax.frontend.tensor), numpy calls, and the composite ops built on them (stax.frontend.ops)."""
