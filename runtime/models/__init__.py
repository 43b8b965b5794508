"""Model implementations (one Llama-family decoder) and the weight loader."""
