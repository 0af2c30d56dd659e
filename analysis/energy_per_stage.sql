-- Energy and time per stage per system, with each stage's share of the run (SEED-22).
-- needs: stages, runs
SELECT r.system, r.model, r.gpus, s.run, s.stage,
       s.energy_j, s.energy_share, s.time_s, s.time_share
FROM stages s JOIN runs r USING (run)
ORDER BY r.system, s.run, s.energy_j DESC
