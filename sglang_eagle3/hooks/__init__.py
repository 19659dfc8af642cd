"""The SGLang plugin and its hooks: the only folder that imports sglang at module level."""
