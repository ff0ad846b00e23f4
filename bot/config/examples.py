"""What a good value of each setting looks like: appended to every message about a bad one."""

from __future__ import annotations

# What a good value looks like, appended to every message about the setting.
EXAMPLES: dict[str, str] = {
    "aws_regions": "KIMI_AWS_REGIONS=us-east-1,us-west-2",
    "alert_thresholds_hours": "KIMI_ALERT_THRESHOLDS_HOURS=168,72,24,6,1",
    "roles": """KIMI_ROLES='{"approver": ["U0APPROVER"], "admin": ["S0ADMINS"]}'""",
    "endpoints": "endpoints: in the KIMI_CONFIG file (see deploy/kimi-ops.example.yaml)",
    "services": "services: [{name: kimi, sides: [kimi-blue, kimi-green], route: {gateway: {name: public}}}] in KIMI_CONFIG",
    "database_url": "KIMI_DATABASE_URL=postgresql+psycopg://kimi@db.internal:5432/kimi",
    "data_dir": "KIMI_DATA_DIR=/var/lib/kimi-ops",
    "evaluation_set": "KIMI_EVALUATION_SET=deploy/evaluation/kimi-k3-default.yaml",
    "log_format": "KIMI_LOG_FORMAT=json",
    "log_level": "KIMI_LOG_LEVEL=INFO",
    "auto_migrate": "KIMI_AUTO_MIGRATE=1",
    "readiness_failures_to_alert": "KIMI_READINESS_FAILURES_TO_ALERT=3",
    "reservation_watch_minutes": "KIMI_RESERVATION_WATCH_MINUTES=15",
    "readiness_probe_minutes": "KIMI_READINESS_PROBE_MINUTES=5",
    "metrics_watch_minutes": "KIMI_METRICS_WATCH_MINUTES=1",
    "drill_period_days": "KIMI_DRILL_PERIOD_DAYS=30",
    "drill_poll_seconds": "KIMI_DRILL_POLL_SECONDS=15",
    "drill_timeout_minutes": "KIMI_DRILL_TIMEOUT_MINUTES=60",
    "probe_concurrency": "KIMI_PROBE_CONCURRENCY=16",
    "rollout_poll_seconds": "KIMI_ROLLOUT_POLL_SECONDS=5",
    "traffic_sweep": """KIMI_TRAFFIC_SWEEP='{"ceiling": 64}'""",
    "alertmanager_url": "KIMI_ALERTMANAGER_URL=http://alertmanager-operated.monitoring:9093",
    "alertmanager_webhook_token": "KIMI_ALERTMANAGER_WEBHOOK_TOKEN=$(openssl rand -hex 32), from a Secret",
    "prometheus_rule_labels": """KIMI_PROMETHEUS_RULE_LABELS='{"release": "kube-prometheus-stack"}'""",
    "traffic_objectives": """KIMI_TRAFFIC_OBJECTIVES='{"ttft_p95_ms": 2000}'""",
}
