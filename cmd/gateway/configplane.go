package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/alert"
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/configstore"
	"github.com/jetway-gateway/jetway/internal/dynamotable"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// configLoadTimeout bounds reading the whole config table at start.
const configLoadTimeout = 2 * time.Minute

// configuration is the configuration in force: the tenants file, or with
// JETWAY_CONFIG_TABLE the table (seeded from the file when it is empty),
// kept in step by an Applier that runs until the server stops.
func (srv *server) configuration(file *config.Config, awsCfg aws.Config, metrics *telemetry.Metrics) (*config.Live, error) {
	s := srv.s
	if s.ConfigTable == "" {
		return config.NewLive(file), nil
	}
	store := configstore.NewStore(dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) { o.Retryer = dynamoRetryer(s.DynamoDBMaxAttempts) }), s.ConfigTable)
	store.SetObserver(metrics)
	a := configstore.NewApplier(store, file.Auth, srv.logger, configstore.ApplierOptions{
		PollInterval: s.ConfigPoll,
		Observe:      metrics.ConfigPoll,
		// The model label follows the catalogue in force.
		Applied: func(_, next *config.Config) { metrics.LimitModels(modelIDs(next)) },
	})
	ctx, cancel := context.WithTimeout(srv.bg, configLoadTimeout)
	defer cancel()
	head, err := store.Head(ctx)
	if err != nil {
		return nil, fmt.Errorf("config table %s: %w", s.ConfigTable, err)
	}
	if err := a.Load(ctx); err != nil {
		return nil, fmt.Errorf("config table %s: %w", s.ConfigTable, err)
	}
	if head == 0 {
		// A new table: the tenants file is its seed (idempotent, so
		// servers starting together seed it once between them).
		r, err := configstore.NewService(a).Import(ctx, file)
		if err != nil {
			return nil, fmt.Errorf("config table %s: seed from the tenants file: %w", s.ConfigTable, err)
		}
		srv.logger.Info("config_seeded", zap.String("table", s.ConfigTable), zap.Int("created", r.Created),
			zap.Int("unchanged", r.Unchanged))
	}
	metrics.LimitModels(modelIDs(a.Live().Load()))
	srv.config = a
	go a.Run(srv.bg)
	return a.Live(), nil
}

// alerts is the quota alerts' notifier: nil without a sink. Which
// server sends an event is decided in the quota table (one conditional
// put per threshold crossed), or in memory without one.
func (srv *server) alerts(awsCfg aws.Config, dynamo *dynamodb.Client, metrics *telemetry.Metrics) (*alert.Notifier, error) {
	s := srv.s
	var sinks []alert.Sink
	if s.AlertWebhookURL != "" {
		wh, err := alert.NewWebhook(s.AlertWebhookURL, s.AlertWebhookSecret, &http.Client{Timeout: 10 * time.Second}, alert.WebhookOptions{})
		if err != nil {
			return nil, fmt.Errorf("JETWAY_ALERT_WEBHOOK_URL: %w", err)
		}
		sinks = append(sinks, wh)
	}
	if s.AlertSNSTopic != "" {
		sinks = append(sinks, alert.NewSNS(sns.NewFromConfig(awsCfg), s.AlertSNSTopic))
	}
	if len(sinks) == 0 {
		return nil, nil
	}
	claims := alert.NewMemoryClaimer()
	if s.QuotaTable != "" {
		t := dynamotable.NewTable(dynamo, s.QuotaTable, dynamotable.TableQuota)
		t.SetObserver(metrics)
		claims = alert.NewDynamoClaimer(t)
	}
	return alert.New(alert.Options{}, claims, sinks, metrics, srv.logger), nil
}
