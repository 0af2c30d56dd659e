-- Per trace: sessions, calls per session, context reached and compactions (SEED-6).
-- needs: sessions
SELECT trace,
       count(*) AS sessions,
       sum(calls) AS calls,
       sum(subagent_calls) AS subagent_calls,
       median(max_input_tokens) AS median_max_input_tokens,
       max(max_input_tokens) AS max_input_tokens,
       sum(compactions) AS compactions,
       count(*) FILTER (WHERE compactions > 0) AS sessions_with_compaction,
       sum(reused_prefix_tokens) / sum(input_tokens) AS reuse_ratio
FROM sessions
GROUP BY trace
ORDER BY trace
