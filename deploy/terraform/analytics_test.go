package terraform

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/jetway-gateway/jetway/internal/telemetry"
	"github.com/zclconf/go-cty/cty"
)

// columnsOf evaluates a local list of {name, type} objects.
func columnsOf(t *testing.T, d *tfDir, local string) []telemetry.Column {
	t.Helper()
	v := eval(t, "local."+local, d.local(t, local), nil)
	var out []telemetry.Column
	for it := v.ElementIterator(); it.Next(); {
		_, c := it.Element()
		out = append(out, telemetry.Column{
			Name: asString(t, local+".name", c.GetAttr("name")),
			Type: asString(t, local+".type", c.GetAttr("type")),
		})
	}
	return out
}

// checkGlueColumnsEqualUsageRecord: Firehose converts each JSON usage record
// to Parquet against the Glue table, so a field the table lacks is dropped
// and a type mismatch fails the conversion. The table must be the record.
func checkGlueColumnsEqualUsageRecord(t *testing.T, s *stack) {
	an := s.dir(t, "modules/analytics")
	got := columnsOf(t, an, "usage_columns")
	want := telemetry.UsageColumns()
	if len(want) == 0 {
		t.Fatal("telemetry.UsageColumns() is empty")
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Glue columns differ from the usage record\n got: %v\nwant: %v", got, want)
	}

	// The table is built from exactly these locals.
	table := an.block(t, "resource", "aws_glue_catalog_table", "usage")
	sd := nested(table.Body, "storage_descriptor")
	if len(sd) != 1 {
		t.Fatalf("glue table: want one storage_descriptor")
	}
	if len(nested(sd[0].Body, "columns")) != 0 {
		t.Errorf("glue table: declare columns only through local.usage_columns")
	}
	dyn := nested(sd[0].Body, "dynamic")
	if len(dyn) != 1 || dyn[0].Labels[0] != "columns" || an.source(attr(t, "dynamic columns", dyn[0].Body, "for_each").Expr.Range()) != "local.usage_columns" {
		t.Errorf("glue table: columns must come from dynamic \"columns\" over local.usage_columns")
	}
	pk := nested(table.Body, "dynamic")
	if len(pk) != 1 || pk[0].Labels[0] != "partition_keys" || an.source(attr(t, "dynamic partition_keys", pk[0].Body, "for_each").Expr.Range()) != "local.partition_columns" {
		t.Errorf("glue table: partition keys must come from dynamic \"partition_keys\" over local.partition_columns")
	}
}

// checkPartitionsMatchUsageRecord: the Glue partition keys, their projection
// (zero-padded, digits=2) and Firehose's S3 prefix all produce the path of
// telemetry.UsageRecord.PartitionPath.
func checkPartitionsMatchUsageRecord(t *testing.T, s *stack) {
	an := s.dir(t, "modules/analytics")
	ts := time.Date(2026, time.January, 5, 7, 4, 5, 0, time.UTC)
	path := telemetry.UsageRecord{TS: ts}.PartitionPath()
	values := map[string]string{}
	var names []string
	for _, seg := range strings.Split(path, "/") {
		k, v, ok := strings.Cut(seg, "=")
		if !ok {
			t.Fatalf("PartitionPath %q: segment %q is not key=value", path, seg)
		}
		names = append(names, k)
		values[k] = v
	}
	if strings.Join(names, "/") != "year/month/day/hour" {
		t.Fatalf("PartitionPath %q: want year/month/day/hour", path)
	}

	parts := columnsOf(t, an, "partition_columns")
	var got []string
	for _, p := range parts {
		got = append(got, p.Name)
		if p.Type != "string" {
			t.Errorf("partition %s has type %s; the zero-padded values are strings", p.Name, p.Type)
		}
	}
	if strings.Join(got, "/") != strings.Join(names, "/") {
		t.Errorf("partition keys %v, want %v", got, names)
	}

	table := an.block(t, "resource", "aws_glue_catalog_table", "usage")
	params, ok := attr(t, "glue table", table.Body, "parameters").Expr.(*hclsyntax.ObjectConsExpr)
	if !ok {
		t.Fatalf("glue table: parameters must be an object literal")
	}
	param := func(k string) string {
		t.Helper()
		e := item(params, k)
		if e == nil {
			t.Fatalf("glue table: no parameter %q", k)
		}
		return asString(t, k, eval(t, "glue parameter "+k, e, nil))
	}
	if param("projection.enabled") != "true" {
		t.Errorf("partition projection is off")
	}
	for _, n := range names {
		if param("projection."+n+".type") != "integer" {
			t.Errorf("projection.%s.type must be integer", n)
		}
		if want := fmt.Sprint(len(values[n])); param("projection."+n+".digits") != want {
			t.Errorf("projection.%s.digits = %s, want %s (PartitionPath writes %q)", n, param("projection."+n+".digits"), want, values[n])
		}
	}

	// storage.location.template is not literal (it names the bucket); check its shape.
	tmpl := an.source(item(params, "storage.location.template").Range())
	wantTmpl := "${local.usage_prefix}year=$${year}/month=$${month}/day=$${day}/hour=$${hour}/"
	if !strings.HasSuffix(strings.Trim(tmpl, `"`), wantTmpl) {
		t.Errorf("storage.location.template = %s, want it to end with %s", tmpl, wantTmpl)
	}

	// Firehose's prefix, with its timestamp namespace filled in for ts.
	fh := an.block(t, "resource", "aws_kinesis_firehose_delivery_stream", "usage")
	ext := nested(fh.Body, "extended_s3_configuration")
	if len(ext) != 1 {
		t.Fatalf("firehose: want one extended_s3_configuration")
	}
	ctx := an.evalContext()
	ctx.Variables["local"] = cty.ObjectVal(map[string]cty.Value{"usage_prefix": eval(t, "usage_prefix", an.local(t, "usage_prefix"), nil)})
	prefix := asString(t, "prefix", eval(t, "firehose prefix", attr(t, "extended_s3_configuration", ext[0].Body, "prefix").Expr, ctx))
	r := strings.NewReplacer("!{timestamp:yyyy}", ts.Format("2006"), "!{timestamp:MM}", ts.Format("01"), "!{timestamp:dd}", ts.Format("02"), "!{timestamp:HH}", ts.Format("15"))
	if got, want := r.Replace(prefix), "usage/"+path+"/"; got != want {
		t.Errorf("firehose writes %s, want %s (PartitionPath)", got, want)
	}

	// Parquet conversion against this very table.
	fc := nested(ext[0].Body, "data_format_conversion_configuration")
	if len(fc) != 1 {
		t.Fatalf("firehose: no data_format_conversion_configuration")
	}
	sc := nested(fc[0].Body, "schema_configuration")
	if len(sc) != 1 || an.source(attr(t, "schema_configuration", sc[0].Body, "table_name").Expr.Range()) != "aws_glue_catalog_table.usage.name" {
		t.Errorf("firehose must convert against aws_glue_catalog_table.usage")
	}
}
