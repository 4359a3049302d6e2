"""The front end (spec 4.x): the proxy tensor (:mod:`stax.frontend.tensor`, built from mixins on
:mod:`stax.frontend.tracer`), tracing a function to a graph (:mod:`stax.frontend.tracing`), numpy
calls on traced tensors, and the composite ops built on them (:mod:`stax.frontend.ops`)."""
