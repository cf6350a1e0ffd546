"""The networks (Nature CNN, MLPs) and the normalizers around them."""
