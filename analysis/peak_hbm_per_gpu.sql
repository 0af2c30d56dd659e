-- HBM resident per GPU of each replay run against the GPU's capacity (SEED-21: below 80 GB?).
-- needs: footprint, runs
WITH per_run AS (
  SELECT run,
         max(bytes_per_gpu) FILTER (WHERE component = 'total') AS hbm_bytes_per_gpu,
         max(bytes_per_gpu) FILTER (WHERE component = 'hbm_capacity') AS capacity_bytes_per_gpu
  FROM footprint GROUP BY run
)
SELECT r.system, r.model, r.gpus, p.run, p.hbm_bytes_per_gpu, p.capacity_bytes_per_gpu,
       p.hbm_bytes_per_gpu / nullif(p.capacity_bytes_per_gpu, 0) AS fill_ratio,
       p.hbm_bytes_per_gpu < 80e9 AS below_80_gb
FROM per_run p JOIN runs r USING (run)
ORDER BY p.hbm_bytes_per_gpu DESC
