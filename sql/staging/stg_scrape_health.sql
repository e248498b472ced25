-- Scrape health: one row per scrape of a target (the `up`/duration/samples series Prometheus keeps),
-- deduplicated (a record the publisher re-sent after a lost ack lands twice with different offsets).
-- A target that is down, or whose answer was not a whole exposition (empty, over the size limit,
-- cut short, another content type, not one good line), has up = false, no samples, and its error; a
-- scrape with broken lines has up = true, the samples of its good lines, and an error naming the others.
-- column: cluster: cluster name
-- column: scraped_at: when the scrape started
-- column: target: scrape target (URL, or instance for replayed files)
-- column: scrape_job: scrape job (dcgm, node, kueue, scheduler, ray, training, ...)
-- column: instance: host:port of the target
-- column: up: the target answered with HTTP 200 and a whole body with at least one good line
-- column: duration_s: how long the scrape took (request and parse)
-- column: samples: samples in the scrape
-- column: error: why the scrape failed, or the broken exposition lines left out of a scrape that landed; NULL when clean
-- column: interval_s: seconds since this target's previous scrape (NULL for the first)
WITH scrapes AS (
    SELECT *
    FROM raw.scrapes
    WHERE scraped_at >= TIMESTAMPTZ '2000-01-01 00:00:00+00' AND scraped_at <= now() + INTERVAL 1 DAY  -- time sanity
    QUALIFY row_number() OVER (PARTITION BY cluster, target, scraped_at ORDER BY kafka_partition, kafka_offset) = 1
)
SELECT
    cluster,
    scraped_at,
    target,
    job AS scrape_job,
    instance,
    up,
    duration_s,
    samples,
    nullif(error, '') AS error,
    epoch(scraped_at) - epoch(lag(scraped_at) OVER (PARTITION BY cluster, target ORDER BY scraped_at)) AS interval_s
FROM scrapes
