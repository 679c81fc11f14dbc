"""Load a Hugging Face model (Hub id, folder or GGUF file) and stream a chat reply (the Python
face of examples/generate.c).

    python generate.py Qwen/Qwen3-0.6B "Why is the sky blue?"
"""
import sys

import ember

if len(sys.argv) < 3:
    sys.exit(f"usage: {sys.argv[0]} MODEL_ID_OR_DIR_OR_GGUF \"message\"")
tok = ember.AutoTokenizer.from_pretrained(sys.argv[1])
model = ember.AutoModelForCausalLM.from_pretrained(sys.argv[1], device_map="cpu")
ids = tok.apply_chat_template([{"role": "user", "content": sys.argv[2]}])


class Printer:  # the shape of transformers' TextStreamer: put() per token, end() once
    def __init__(self):
        self.ids = []
        self.text = ""

    def put(self, new):
        self.ids += new
        text = tok.decode(self.ids, skip_special_tokens=True)
        print(text[len(self.text):], end="", flush=True)
        self.text = text

    def end(self):
        print()


model.generate([ids], max_new_tokens=200, streamer=Printer())
