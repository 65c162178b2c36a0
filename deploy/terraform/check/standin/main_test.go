package main

import (
	"context"
	"testing"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

func loadTestSchema(t *testing.T) *server {
	t.Helper()
	s, err := load("../schema-aws-6.25.0.json")
	if err != nil {
		t.Fatalf("load schema: %v", err)
	}
	return s
}

func TestLoadServesTheStacksTypes(t *testing.T) {
	s := loadTestSchema(t)
	for _, typ := range []string{"aws_lb_target_group", "aws_ecs_task_definition", "aws_wafv2_web_acl", "aws_dynamodb_table", "aws_kinesis_firehose_delivery_stream"} {
		if s.resources[typ] == nil {
			t.Errorf("resource type %s missing from the schema", typ)
		}
	}
	if s.data["aws_iam_policy_document"] == nil {
		t.Error("data source aws_iam_policy_document missing from the schema")
	}
	if _, err := load("no-such-file.json"); err == nil {
		t.Error("load of a missing file succeeded")
	}
}

// plan runs PlanResourceChange for a create with the given known attributes.
func plan(t *testing.T, s *server, typ string, known map[string]tftypes.Value) map[string]tftypes.Value {
	t.Helper()
	sch := s.resources[typ]
	vt := sch.ValueType().(tftypes.Object)
	vals := map[string]tftypes.Value{}
	for name, at := range vt.AttributeTypes {
		vals[name] = tftypes.NewValue(at, nil)
	}
	for k, v := range known {
		vals[k] = v
	}
	proposed, err := tfprotov6.NewDynamicValue(vt, tftypes.NewValue(vt, vals))
	if err != nil {
		t.Fatal(err)
	}
	prior, err := tfprotov6.NewDynamicValue(vt, tftypes.NewValue(vt, nil))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.PlanResourceChange(context.Background(), &tfprotov6.PlanResourceChangeRequest{TypeName: typ, ProposedNewState: &proposed, PriorState: &prior})
	if err != nil {
		t.Fatalf("plan %s: %v", typ, err)
	}
	v, err := resp.PlannedState.Unmarshal(vt)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]tftypes.Value
	if err := v.As(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPlanMarksComputedUnknownAndKeepsConfig(t *testing.T) {
	s := loadTestSchema(t)
	got := plan(t, s, "aws_dynamodb_table", map[string]tftypes.Value{"name": tftypes.NewValue(tftypes.String, "t")})
	if got["arn"].IsKnown() {
		t.Error("computed arn is known at plan, want unknown")
	}
	var name string
	if err := got["name"].As(&name); err != nil || name != "t" {
		t.Errorf("name = %v, want the configured t", got["name"])
	}
}

func TestPlanACMValidationOptionsPerDomain(t *testing.T) {
	s := loadTestSchema(t)
	got := plan(t, s, "aws_acm_certificate", map[string]tftypes.Value{
		"domain_name":               tftypes.NewValue(tftypes.String, "a.example.com"),
		"subject_alternative_names": tftypes.NewValue(tftypes.Set{ElementType: tftypes.String}, []tftypes.Value{tftypes.NewValue(tftypes.String, "b.example.com")}),
	})
	dvo := got["domain_validation_options"]
	if !dvo.IsKnown() {
		t.Fatal("domain_validation_options unknown at plan: for_each over it would fail")
	}
	var els []tftypes.Value
	if err := dvo.As(&els); err != nil {
		t.Fatal(err)
	}
	if len(els) != 2 {
		t.Fatalf("%d validation options, want one per domain (2)", len(els))
	}
}

func TestApplyIsRefused(t *testing.T) {
	s := loadTestSchema(t)
	if _, err := s.ApplyResourceChange(context.Background(), &tfprotov6.ApplyResourceChangeRequest{TypeName: "aws_dynamodb_table"}); err == nil {
		t.Fatal("apply succeeded on the stand-in")
	}
}
