"""Local model building blocks: the real Qwen tokenizer and chat templates, built offline."""
