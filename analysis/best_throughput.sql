-- Sweep: the best throughput per GPU each system reaches per stage among fitting points (SEED-19, SEED-20).
-- needs: sweep
SELECT system, stage,
       max(tokens_per_s_per_gpu) AS best_tokens_per_s_per_gpu,
       arg_max(gpus, tokens_per_s_per_gpu) AS at_gpus,
       arg_max(batch_size, tokens_per_s_per_gpu) AS at_batch_size,
       min(ttft_s) AS best_ttft_s
FROM sweep
WHERE fits
GROUP BY system, stage
ORDER BY stage, best_tokens_per_s_per_gpu DESC
