package main

import (
	"errors"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/openmcp-local/cluster-provider/controllers/labeller"
	"github.com/openmcp-local/cluster-provider/controllers/scheduler"
)

// Config is the operator's configuration file (--config). Every section is optional; a missing
// file flag means the zero Config.
type Config struct {
	// AccessRequest configures the central AccessRequest labeller (--controllers accessrequest):
	// `accessRequest: {selector: <label selector>}`, as the AccessRequest controller's
	// Configuration section describes.
	AccessRequest *labeller.Config `json:"accessRequest,omitempty"`

	// Scheduler configures the ClusterRequest scheduler (--controllers scheduler), which needs
	// it: scope, strategy, selectors and purposeMappings (docs/operations.md, "Scheduler configuration").
	Scheduler *scheduler.Config `json:"scheduler,omitempty"`
}

// loadConfig reads, strictly decodes and validates the configuration file at path. An empty path
// is the zero Config. Errors name the file and the offending field, e.g.
// `unknown field "accessRequest.selectr"` or `accessRequest.selector.matchExpressions[0].operator`.
func loadConfig(path string) (*Config, error) {
	c := &Config{}
	if path == "" {
		return c, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	if err := decodeConfig(data, c); err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	return c, nil
}

// decodeConfig decodes YAML into c, case-sensitively, rejecting duplicate and unknown fields with
// their full path.
func decodeConfig(data []byte, c *Config) error {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	strict, err := json.UnmarshalStrict(j, c, json.DisallowUnknownFields, json.DisallowDuplicateFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// Validate fills in the defaults and reports every invalid field of c, naming its path.
func (c *Config) Validate() error {
	errs := []error{c.AccessRequest.Validate()}
	if c.Scheduler != nil {
		c.Scheduler.Default()
		errs = append(errs, c.Scheduler.Validate())
	}
	return errors.Join(errs...)
}

// checkControllers reports a controller that --controllers enables but whose section c lacks.
func (c *Config) checkControllers(enabled map[string]bool, path string) error {
	if enabled[controllerScheduler] && c.Scheduler == nil {
		if path == "" {
			return errors.New("--controllers names scheduler, which needs --config with a scheduler: section (its purposeMappings); see docs/operations.md, \"Scheduler configuration\"")
		}
		return fmt.Errorf("--controllers names scheduler, but --config %s has no scheduler: section; add one with its purposeMappings (docs/operations.md, \"Scheduler configuration\")", path)
	}
	return nil
}

// AccessRequestSelector is the labeller's selector: labels.Everything() unless the
// accessRequest section sets one.
func (c *Config) AccessRequestSelector() (labels.Selector, error) {
	return c.AccessRequest.AsSelector()
}
