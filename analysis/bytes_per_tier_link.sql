-- KV bytes moved over each tier link (SSD→DRAM, DRAM→HBM, HBM→DRAM, DRAM→SSD) per replay run (SEED-5, SEED-7).
-- needs: summary, runs
SELECT r.system, r.model, r.gpus, s.run,
       substr(s.key, length('kv_tiers.bytes.') + 1) AS link,
       s.value AS bytes
FROM summary s JOIN runs r USING (run)
WHERE s.key LIKE 'kv_tiers.bytes.%'
ORDER BY s.run, link
