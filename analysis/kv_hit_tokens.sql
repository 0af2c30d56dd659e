-- Where each replay run found its prompt tokens: HBM, DRAM or SSD hits, or recomputed (SEED-5).
-- needs: summary, runs
WITH k AS (
  SELECT run,
         max(value) FILTER (WHERE key = 'kv_tiers.input_tokens') AS input_tokens,
         max(value) FILTER (WHERE key = 'kv_tiers.hits.hbm.tokens') AS hbm,
         max(value) FILTER (WHERE key = 'kv_tiers.hits.dram.tokens') AS dram,
         max(value) FILTER (WHERE key = 'kv_tiers.hits.ssd.tokens') AS ssd,
         max(value) FILTER (WHERE key = 'kv_tiers.recompute.tokens') AS recompute,
         max(value) FILTER (WHERE key = 'kv_tiers.hit_ratio') AS hit_ratio
  FROM summary WHERE key LIKE 'kv_tiers.%' GROUP BY run
)
SELECT r.system, k.run, k.input_tokens,
       k.hbm / k.input_tokens AS hbm_hit_share,
       k.dram / k.input_tokens AS dram_hit_share,
       k.ssd / k.input_tokens AS ssd_hit_share,
       k.recompute / k.input_tokens AS recompute_share,
       k.hit_ratio AS hit_ratio_of_reused
FROM k JOIN runs r USING (run)
WHERE k.input_tokens > 0
ORDER BY k.run
