-- HBM resident per GPU of each replay run against the GPU's capacity (SEED-21: below 80 GB?).
-- needs: footprint, runs
SELECT r.system, r.model, r.gpus, f.run,
       sum(f.bytes_per_gpu) AS hbm_bytes_per_gpu,
       max(f.capacity_bytes_per_gpu) AS capacity_bytes_per_gpu,
       sum(f.bytes_per_gpu) / nullif(max(f.capacity_bytes_per_gpu), 0) AS fill_ratio,
       sum(f.bytes_per_gpu) < 80e9 AS below_80_gb
FROM footprint f JOIN runs r USING (run)
GROUP BY ALL
ORDER BY hbm_bytes_per_gpu DESC
