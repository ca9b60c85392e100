"""Data sets and table loading (layer: base): the forest-fires and garment loaders and synthetic data."""
