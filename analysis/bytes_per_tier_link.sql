-- KV bytes moved over each tier link (HBM, DRAM, SSD) in each replay run (SEED-5, SEED-7).
-- needs: replay_calls, runs
WITH per_run AS (
  SELECT run,
         sum(kv_ssd_to_dram_bytes) AS ssd_to_dram,
         sum(kv_dram_to_hbm_bytes) AS dram_to_hbm,
         sum(kv_hbm_to_dram_bytes) AS hbm_to_dram,
         sum(kv_dram_to_ssd_bytes) AS dram_to_ssd
  FROM replay_calls GROUP BY run
)
SELECT r.system, p.run, u.link, u.bytes
FROM per_run p
JOIN runs r USING (run)
CROSS JOIN LATERAL (VALUES
  ('ssd_to_dram', p.ssd_to_dram), ('dram_to_hbm', p.dram_to_hbm),
  ('hbm_to_dram', p.hbm_to_dram), ('dram_to_ssd', p.dram_to_ssd)) AS u(link, bytes)
ORDER BY p.run, u.link
