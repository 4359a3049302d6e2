"""PyTorch models: the project's suite and zoo, the real-model zoo, their exports and the comparison with TorchInductor."""
