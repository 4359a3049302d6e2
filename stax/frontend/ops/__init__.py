"""Composite ops the front end builds from primitive ones: gathers, sorting, nn layers, pooling, resampling, 3-D convolution and the convolution forms."""
