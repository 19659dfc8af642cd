"""EAGLE-3 training data through SGLang, its layout recorded (python -m sglang_eagle3.capture)."""
