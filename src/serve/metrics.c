/* The counters and histograms of /metrics, in Prometheus' text format with vLLM's names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve_impl.h"

static const double LAT_BOUNDS[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25,
                                    0.5,   0.75,  1.0,  2.5,  5.0,  7.5,  10.0, 20.0, 40.0,
                                    80.0,  160.0};

void srv_hist_init(srv_hist *h) {
    memset(h, 0, sizeof *h);
    h->bounds = LAT_BOUNDS;
    h->n = (int)(sizeof LAT_BOUNDS / sizeof *LAT_BOUNDS);
}

void srv_hist_add(srv_hist *h, double v) {
    for (int i = 0; i < h->n; i++)
        if (v <= h->bounds[i]) {
            h->counts[i]++;
            break;
        }
    h->count++;
    h->sum += v;
}

static void hist_text(FILE *f, const char *name, const char *help, const srv_hist *h,
                      const char *label) {
    fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    int64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->counts[i];
        fprintf(f, "%s_bucket{%s,le=\"%g\"} %lld\n", name, label, h->bounds[i], (long long)cum);
    }
    fprintf(f, "%s_bucket{%s,le=\"+Inf\"} %lld\n", name, label, (long long)h->count);
    fprintf(f, "%s_sum{%s} %.6f\n%s_count{%s} %lld\n", name, label, h->sum, name, label,
            (long long)h->count);
}

bool srv_metrics_text(em_server *s, char **buf, size_t *len) {
    FILE *f = open_memstream(buf, len);
    if (!f) return false;
    char label[300], *p = label;
    p += sprintf(p, "model_name=\"");
    for (const char *q = s->model_name; *q && p < label + sizeof label - 8; q++) {
        if (*q == '"' || *q == '\\') *p++ = '\\';
        if (*q == '\n') {
            *p++ = '\\';
            *p++ = 'n';
        } else {
            *p++ = *q;
        }
    }
    strcpy(p, "\"");
    pthread_mutex_lock(&s->mu);
    fprintf(f, "# HELP vllm:num_requests_running Requests in the running batch.\n"
               "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{%s} %d\n",
            label, s->n_running);
    fprintf(f, "# HELP vllm:num_requests_waiting Requests waiting for a row.\n"
               "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{%s} %d\n",
            label, s->n_waiting);
    fprintf(f, "# HELP vllm:kv_cache_usage_perc Share of KV-cache positions in use (1 = full).\n"
               "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{%s} %.6f\n",
            label, s->kv_total ? (double)s->kv_used / (double)s->kv_total : 0.0);
    fprintf(f, "# HELP vllm:num_preemptions_total Running sequences preempted to free KV-cache "
               "blocks (recomputed when readmitted; only with a KV budget).\n"
               "# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total{%s} %lld\n",
            label, (long long)s->preemptions);
    fprintf(f, "# HELP ember:kv_cache_blocks_used Blocks of the paged KV cache held by any "
               "sequence, kept prompts included (0 with the dense cache).\n"
               "# TYPE ember:kv_cache_blocks_used gauge\nember:kv_cache_blocks_used{%s} %lld\n"
               "# HELP ember:kv_cache_blocks_total Blocks of the paged KV cache (its budget).\n"
               "# TYPE ember:kv_cache_blocks_total gauge\nember:kv_cache_blocks_total{%s} %lld\n",
            label, (long long)s->kv_blocks_used, label, (long long)s->kv_blocks_total);
    fprintf(f, "# HELP vllm:prompt_tokens_total Prefilled prompt tokens.\n"
               "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{%s} %lld\n",
            label, (long long)s->prompt_tokens);
    fprintf(f, "# HELP vllm:generation_tokens_total Generated tokens.\n"
               "# TYPE vllm:generation_tokens_total counter\n"
               "vllm:generation_tokens_total{%s} %lld\n",
            label, (long long)s->generation_tokens);
    fprintf(f, "# HELP vllm:request_success_total Finished requests by finish reason.\n"
               "# TYPE vllm:request_success_total counter\n");
    const char *reasons[3] = {"stop", "length", "abort"};
    int64_t counts[3] = {s->ok_stop, s->ok_length, s->ok_abort};
    for (int i = 0; i < 3; i++)
        fprintf(f, "vllm:request_success_total{%s,finished_reason=\"%s\"} %lld\n", label,
                reasons[i], (long long)counts[i]);
    fprintf(f, "# HELP ember:kv_cache_shifts_total Whole-cache copies made to fit a prompt or to "
               "reclaim positions (a paged cache will not need them).\n"
               "# TYPE ember:kv_cache_shifts_total counter\nember:kv_cache_shifts_total{%s} %lld\n",
            label, (long long)s->kv_shifts);
    fprintf(f, "# HELP ember:prefill_chunks_total Prompt chunks prefilled between two decode steps "
               "(chunked prefill of a prompt joining running sequences)\n"
               "# TYPE ember:prefill_chunks_total counter\nember:prefill_chunks_total{%s} %lld\n",
            label, (long long)s->prefill_chunks);
    fprintf(f, "# HELP ember:prefill_batches_total Groups of waiting prompts prefilled together "
               "(one batched forward per chunk)\n"
               "# TYPE ember:prefill_batches_total counter\nember:prefill_batches_total{%s} %lld\n"
               "# HELP ember:prefill_batch_prompts_total Prompts prefilled in those groups (divided "
               "by ember:prefill_batches_total: prompts per batch)\n"
               "# TYPE ember:prefill_batch_prompts_total counter\n"
               "ember:prefill_batch_prompts_total{%s} %lld\n",
            label, (long long)s->prefill_batches, label, (long long)s->prefill_batch_prompts);
    fprintf(f, "# HELP vllm:prefix_cache_queries_total Prompt tokens looked up in the prefix cache.\n"
               "# TYPE vllm:prefix_cache_queries_total counter\n"
               "vllm:prefix_cache_queries_total{%s} %lld\n"
               "# HELP vllm:prefix_cache_hits_total Prompt tokens whose keys and values were "
               "reused from the prefix cache.\n"
               "# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total{%s} %lld\n",
            label, (long long)s->prefix_queries, label, (long long)s->prefix_hits);
    fprintf(f, "# HELP ember:compiled_programs Compiled decode-step programs held (--compile: at "
               "most one per batch bucket and key bucket; 0 without --compile).\n"
               "# TYPE ember:compiled_programs gauge\nember:compiled_programs{%s} %lld\n"
               "# HELP ember:compiles_total Traces and compilations of the decode step (--compile; "
               "flat once every batch and key bucket in use was seen).\n"
               "# TYPE ember:compiles_total counter\nember:compiles_total{%s} %lld\n"
               "# HELP ember:compile_seconds_total Time spent tracing and compiling.\n"
               "# TYPE ember:compile_seconds_total counter\nember:compile_seconds_total{%s} %.6f\n",
            label, (long long)s->compiled_programs, label, (long long)s->compiles, label,
            s->compile_ms / 1000.0);
    fprintf(f, "# HELP ember:prefill_compiled_programs Compiled prefill-chunk programs held "
               "(--compile over the paged cache: at most one per batch bucket, power-of-two "
               "column bucket and table bucket).\n"
               "# TYPE ember:prefill_compiled_programs gauge\n"
               "ember:prefill_compiled_programs{%s} %lld\n"
               "# HELP ember:prefill_compiles_total Traces and compilations of prefill chunks.\n"
               "# TYPE ember:prefill_compiles_total counter\nember:prefill_compiles_total{%s} %lld\n",
            label, (long long)s->prefill_programs, label, (long long)s->prefill_compiles);
    hist_text(f, "vllm:time_to_first_token_seconds", "Time to the first token.", &s->ttft, label);
    hist_text(f, "vllm:inter_token_latency_seconds", "Time between two tokens of a request.",
              &s->itl, label);
    hist_text(f, "vllm:e2e_request_latency_seconds", "Time from arrival to the last token.",
              &s->e2e, label);
    pthread_mutex_unlock(&s->mu);
    if (fclose(f) == 0) return true;
    free(*buf);
    *buf = NULL;
    return false;
}
