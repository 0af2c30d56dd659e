-- Where each replay run found its prompt tokens: HBM, DRAM or SSD hits, or recomputed (SEED-5).
-- needs: replay_calls, runs
SELECT r.system, c.run,
       sum(c.input_tokens) AS input_tokens,
       sum(c.kv_hbm_hit_tokens) / sum(c.input_tokens) AS hbm_hit_share,
       sum(c.kv_dram_hit_tokens) / sum(c.input_tokens) AS dram_hit_share,
       sum(c.kv_ssd_hit_tokens) / sum(c.input_tokens) AS ssd_hit_share,
       sum(c.kv_recompute_tokens) / sum(c.input_tokens) AS recompute_share
FROM replay_calls c JOIN runs r USING (run)
GROUP BY ALL
ORDER BY c.run
