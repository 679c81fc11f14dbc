"""Compile mode from Python: the MLP of eager.py as a compiled function (examples/compile.c in
C). The first call for a shape traces and plans it; later calls run the plan; a new batch size
is a new program, and EMBER_LOG_COMPILES=1 says why it was compiled."""
import numpy as np

import ember

rng = np.random.default_rng(0)
w1 = ember.tensor(rng.normal(0, 0.1, (128, 64)).astype(np.float32))
w2 = ember.tensor(rng.normal(0, 0.1, (10, 128)).astype(np.float32))


def mlp(x):
    h = ember.ops.gelu(ember.ops.linear(x, w1, None), False)
    return ember.ops.softmax(ember.ops.linear(h, w2, None), -1)


f = ember.compile(mlp)
for batch in (4, 8):
    for rep in range(3):
        x = rng.normal(0, 1, (batch, 64)).astype(np.float32)
        p = f(x)
        assert np.allclose(p.numpy(), mlp(ember.tensor(x)).numpy(), atol=1e-6)
st = f.stats()
print(f"{st['calls']} calls, {st['compiles']} compiles (last: {st['last_reason']}), "
      f"{st['nodes_traced']} ops traced, {st['kernels']} kernels per call")
