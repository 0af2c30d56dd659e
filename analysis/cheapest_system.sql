-- For each trace, the replay runs ranked by energy per generated token at each run's own GPU count and batch (gpus column; for GPUs and $ at one service level use agentx compare).
-- needs: replay_calls, runs
WITH per_run AS (
  SELECT c.run, r.trace_sha256, r.trace_path, r.system, r.model, r.gpus,
         sum(c.total_energy_j) / nullif(sum(c.output_tokens), 0) AS j_per_output_token,
         sum(c.ttft_s) / count(*) AS mean_ttft_s
  FROM replay_calls c JOIN runs r USING (run)
  GROUP BY ALL
)
SELECT rank() OVER (PARTITION BY trace_sha256 ORDER BY j_per_output_token, run) AS rank, *
FROM per_run
ORDER BY trace_sha256, rank
