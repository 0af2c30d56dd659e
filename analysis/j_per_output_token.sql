-- Joules per generated token of each replay run, all stages together (SEED-22).
-- needs: replay_calls, runs
SELECT r.system, r.model, r.gpus, c.run,
       sum(c.total_energy_j) AS energy_j,
       sum(c.output_tokens) AS output_tokens,
       sum(c.total_energy_j) / nullif(sum(c.output_tokens), 0) AS j_per_output_token
FROM replay_calls c JOIN runs r USING (run)
GROUP BY ALL
ORDER BY j_per_output_token
