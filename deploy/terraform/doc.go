// Package terraform holds Jetway's infrastructure: reusable Terraform modules
// under modules/ and one root per environment under envs/. It has no Go API.
//
// No terraform binary or provider can run where the tests run, so the tests
// of this package read the HCL itself (github.com/hashicorp/hcl/v2) and check
// what a plan would otherwise catch late or never: every file parses and is
// formatted, every variable is declared and used, module calls match the
// modules' inputs, no account ids, regions or ARNs are written in code, no IAM
// statement grants a wildcard action, the Glue table equals the usage record,
// and the task's settings, ports, health check and timeouts match the server
// (docs/configuration.md). `go test ./deploy/terraform -update` rewrites the
// generated input/output tables of the READMEs and formats the files.
package terraform
