"""Fine-tune a causal LM on a text file and save it as a Hub folder (the Python face of
`ember train`), then generate from the trained weights.

    python train.py MODEL_DIR corpus.txt out/ [steps]
"""
import sys

import ember

if len(sys.argv) < 4:
    sys.exit(f"usage: {sys.argv[0]} MODEL_DIR TEXT_OR_IDS.npy OUT_DIR [steps]")
model_dir, data, out = sys.argv[1:4]
steps = int(sys.argv[4]) if len(sys.argv) > 4 else 20
# a text file is tokenized with the model's tokenizer; a .npy file already holds ids
tok = None if data.endswith(".npy") else ember.AutoTokenizer.from_pretrained(model_dir)
model = ember.AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
trainer = ember.Trainer(model, data, tokenizer=tok, seq_len=32, batch_size=4, max_steps=steps,
                        learning_rate=3e-3, lr_scheduler_type="cosine", warmup_steps=steps // 10,
                        max_grad_norm=1.0, val_fraction=0.1)
for s in trainer:
    if s.step % 5 == 0 or s.step == steps - 1:
        print(f"step {s.step:4d}  loss {s.loss:.4f}  lr {s.learning_rate:.2e}  "
              f"{s.tokens / s.seconds:.0f} tokens/s")
print(f"validation loss {trainer.evaluate():.4f}")
trainer.save_model(out)
prompt = tok("The")["input_ids"] if tok else [5, 6, 7]
out = model.generate([prompt], max_new_tokens=20, do_sample=False)[0]
print(tok.decode(out) if tok else f"generated ids: {out}")
