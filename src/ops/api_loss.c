/* Losses built from the eager ops (ember/autograd.h), differentiable through their rules. */
#include "core/tensor_impl.h"
#include "ember/autograd.h"
#include "ember/ops.h"

em_tensor *em_cross_entropy_(em_ctx *c, const char *file, int line, em_tensor *logits,
                             em_tensor *labels, int64_t ignore_index) {
    if (!c || c->err.status || !logits || !labels) return NULL;
    char a[96], b[96];
    if (logits->ndim != 2 || labels->ndim != 1 || labels->shape[0] != logits->shape[0] ||
        (labels->dtype != EM_I64 && labels->dtype != EM_I32)) {
        em_fail_at(c, EM_ERR_SHAPE, "cross_entropy", file, line,
                   "logits %s and labels %s: logits [N, C] and i64/i32 labels [N] expected",
                   em_tensor_sig(logits, a, sizeof a), em_tensor_sig(labels, b, sizeof b));
        return NULL;
    }
    int last = -1;
    /* the constants below on the logits' device (a PJRT device's loss stays there) */
    em_device *prev = c->device;
    c->device = logits->dev;
    em_tensor *lp = em_log_softmax_(c, file, line, logits, last);
    em_tensor *keep = em_ne_(c, file, line, labels, em_scalar(c, (double)ignore_index, labels->dtype));
    em_tensor *safe = em_where_(c, file, line, keep, labels, em_scalar(c, 0, labels->dtype));
    em_tensor *picked = em_gather_(c, file, line, lp, 1, em_unsqueeze(c, safe, 1));
    picked = em_squeeze(c, picked, 1);
    em_tensor *nll = em_where_(c, file, line, keep, em_neg(c, picked),
                               em_scalar(c, 0, logits->dtype));
    em_tensor *count = em_sum(c, em_cast(c, keep, logits->dtype), NULL, 0, false);
    c->device = prev;
    return em_div_(c, file, line, em_sum(c, nll, NULL, 0, false), count);
}
