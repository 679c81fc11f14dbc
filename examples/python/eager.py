"""A two-layer MLP on the CPU with Ember's eager ops (the Python face of examples/eager.c)."""
import ember
from ember import ops

x = ops.randn("f32", (4, 64), 1, 0.0, 1.0)     # [batch, in]
w1 = ops.randn("f32", (128, 64), 2, 0.0, 0.1)  # Hub layout [out, in]
w2 = ops.randn("f32", (10, 128), 3, 0.0, 0.1)
h = ops.gelu(ops.linear(x, w1, None), False)
p = ops.softmax(ops.linear(h, w2, None), -1)
print("predicted classes:", ops.argmax(p, -1, False).tolist())
try:  # a mistake raises where it happens, naming the op, shapes and device
    x @ w1
except ember.EmberError as e:
    print("as expected:", e)
