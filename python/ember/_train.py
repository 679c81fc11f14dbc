"""Causal-LM training from Python: the loop `ember train` runs (include/ember/train.h), with the
argument names of transformers' TrainingArguments where they mean the same thing.

    model = ember.AutoModelForCausalLM.from_pretrained("tiny-qwen3")
    trainer = ember.Trainer(model, "ids.npy", seq_len=128, batch_size=8, max_steps=100,
                            learning_rate=3e-4, lr_scheduler_type="cosine", warmup_steps=10)
    for step in trainer:            # one TrainStep per optimizer update
        print(step.step, step.loss)
    trainer.save_model("out/")      # a Hub folder transformers and ember load

The model's weights are updated in place: generating with it afterwards uses the trained ones.
"""
from ._ffi import ffi, lib
from . import _check, _ctx, _raise  # ember/__init__ imports this module after defining them


class TrainStep:
    """What one update did: its 0-based index, forward loss before the update, the learning rate
    it used, the total gradient norm before clipping, ids read and wall seconds."""

    __slots__ = ("step", "loss", "learning_rate", "grad_norm", "tokens", "seconds")

    def __init__(self, info):
        self.step = info.step
        self.loss = info.loss
        self.learning_rate = info.lr
        self.grad_norm = info.grad_norm
        self.tokens = info.tokens
        self.seconds = info.seconds

    def as_dict(self):
        return {k: getattr(self, k) for k in self.__slots__}

    def __repr__(self):
        return (f"TrainStep(step={self.step}, loss={self.loss:.6f}, "
                f"learning_rate={self.learning_rate:.3g}, grad_norm={self.grad_norm:.4g})")


def _data(c, data, tokenizer, vocab):
    """em_train_data from a path (.npy ids or text), or from a sequence/array of ids."""
    if isinstance(data, (str, bytes)) or hasattr(data, "__fspath__"):
        path = data if isinstance(data, bytes) else str(data).encode()
        tok = tokenizer._tok if tokenizer is not None else ffi.NULL
        return _check(c, lib.em_train_data_load(c, path, tok, vocab))
    ids = data.tolist() if hasattr(data, "tolist") else list(data)
    if ids and isinstance(ids[0], (list, tuple)):
        raise ValueError("train data: give a 1-D sequence of ids (or a path), not nested lists")
    if any(not isinstance(i, int) for i in ids):
        raise TypeError("train data: ids must be integers")
    arr = ffi.new("int64_t[]", ids or [0])
    return _check(c, lib.em_train_data_from_ids(c, arr, len(ids), vocab, b"python ids"))


class Trainer:
    """Trains an AutoModelForCausalLM on token ids: `data` is a path (a .npy 1-D integer array,
    or a text file tokenized with `tokenizer`) or a sequence of ids. See include/ember/train.h
    for the window order and the loss; errors (a window longer than the model's positions, data
    shorter than one window, ids outside the vocabulary) raise EmberError naming the problem."""

    def __init__(self, model, data, seq_len, max_steps, batch_size=1, learning_rate=1e-3,
                 lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.01,
                 adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, max_grad_norm=0.0,
                 shuffle=True, seed=0, val_fraction=0.0, tokenizer=None):
        c = _ctx()
        o = ffi.new("em_train_options *", lib.em_train_default_options())
        o.seq_len, o.batch, o.steps = seq_len, batch_size, max_steps
        o.lr, o.warmup, o.weight_decay = learning_rate, warmup_steps, weight_decay
        o.beta1, o.beta2, o.eps = adam_beta1, adam_beta2, adam_epsilon
        o.grad_clip, o.shuffle, o.seed, o.val_fraction = max_grad_norm, shuffle, seed, val_fraction
        sched = ffi.new("em_lr_schedule *")
        if not lib.em_lr_schedule_parse(str(lr_scheduler_type).encode(), sched):
            raise ValueError(f"lr_scheduler_type {lr_scheduler_type!r}: 'constant' or 'cosine'")
        o.schedule = sched[0]
        vocab = lib.em_model_config_get(model._m).vocab_size
        d = _data(c, data, tokenizer, vocab)
        self._data = ffi.gc(d, lib.em_train_data_free)
        self._model = model  # the trainer updates its weights; keep it alive
        t = _check(c, lib.em_trainer_create(c, model._m, d, o))
        self._t = ffi.gc(t, lib.em_trainer_free)
        self.max_steps = max_steps
        self.log_history = []

    @property
    def steps_done(self):
        return lib.em_trainer_steps_done(self._t)

    @property
    def train_windows(self):
        return lib.em_trainer_train_windows(self._t)

    @property
    def val_windows(self):
        return lib.em_trainer_val_windows(self._t)

    def step(self):
        """One optimizer update; returns its TrainStep (also appended to log_history)."""
        c = _ctx()
        info = ffi.new("em_train_step_info *")
        if lib.em_trainer_step(c, self._t, info) != 0:
            _raise(c)
        s = TrainStep(info)
        self.log_history.append(s)
        return s

    def __iter__(self):
        while self.steps_done < self.max_steps:
            yield self.step()

    def train(self):
        """Runs the remaining steps; returns the list of their TrainSteps."""
        return list(self)

    def evaluate(self):
        """Mean loss over the held-out windows (val_fraction > 0), gradients off."""
        c = _ctx()
        v = ffi.new("double *")
        if lib.em_trainer_eval(c, self._t, v) != 0:
            _raise(c)
        return v[0]

    def save_model(self, output_dir):
        """A Hub folder (model.safetensors, config.json, generation_config.json, the tokenizer
        files) plus trainer_state.safetensors for resume_from_checkpoint."""
        c = _ctx()
        if lib.em_trainer_save(c, self._t, str(output_dir).encode()) != 0:
            _raise(c)

    def resume_from_checkpoint(self, checkpoint_dir):
        """Continues a run saved by save_model: the model must have been loaded from that folder
        and the data options (seq_len, batch_size, shuffle, seed, val_fraction) be the same."""
        c = _ctx()
        if lib.em_trainer_resume(c, self._t, str(checkpoint_dir).encode()) != 0:
            _raise(c)


def train(model, data, **kwargs):
    """Trainer(model, data, **kwargs).train(): the list of TrainSteps."""
    return Trainer(model, data, **kwargs).train()
