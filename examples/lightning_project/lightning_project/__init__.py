"""A small Lightning project: an MLP classifier and two image DataModules (digits, MNIST)."""
