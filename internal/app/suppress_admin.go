package app

import (
	"github.com/gorilla/mux"

	"github.com/ivrsched/ivrsched/internal/admin"
)

// suppressionAPI is the do-not-call list's admin API of this process
// (admin.Suppressions): on the ivr-suppressions topic, behind the admin
// token, whose wrong attempts count in attempts.
func suppressionAPI(cfg Config, attempts *admin.Attempts) *admin.Suppressions {
	return &admin.Suppressions{Store: admin.KafkaSuppressions{Kafka: cfg.Kafka, Topics: cfg.Topics}, Key: cfg.SuppressionKey,
		Token: cfg.AdminToken, Attempts: attempts, Clock: cfg.Clock, Logger: cfg.logger().With("role", "admin")}
}

// mountSuppressions serves the API at admin.SuppressionsPath and below.
func mountSuppressions(r *mux.Router, cfg Config, attempts *admin.Attempts) {
	r.PathPrefix(admin.SuppressionsPath).Handler(suppressionAPI(cfg, attempts))
}
