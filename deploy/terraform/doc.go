// Package terraform holds Jetway's infrastructure: reusable Terraform modules
// under modules/ and one root per environment under envs/. It has no Go API.
//
// Its tests run the real terraform (or tofu) offline with the stand-in AWS
// provider of check/: init, validate and plan of every environment, and the
// terraform test files of modules/jetway/tests. They also read the HCL itself
// (github.com/hashicorp/hcl/v2) for what the tools do not check: formatting,
// unused variables and locals, no account ids, regions or ARNs in code, no
// wildcard IAM actions, the Glue table equal to the usage record, and the
// task's settings, ports, health check and timeouts matching the server
// (docs/configuration.md, docs/operations.md). `go test ./deploy/terraform
// -update` rewrites the generated input/output tables of the READMEs and
// formats the files.
package terraform
