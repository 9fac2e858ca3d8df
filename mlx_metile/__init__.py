"""mlx-metile"""
