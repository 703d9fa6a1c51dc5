package exporter

import (
	"fmt"
	"os"
	"regexp"
	"time"

	"go.yaml.in/yaml/v3"
)

// Query is one named query of the exporter.
type Query struct {
	Name string `yaml:"name"`
	SQL  string `yaml:"sql"`
	// Window for a query without a WINDOW clause (default: Config.Window).
	Window time.Duration `yaml:"window"`
	// MaxSeries bounds the label sets kept (default: Config.MaxSeries).
	MaxSeries int `yaml:"max_series"`
	// Cumulative (default true): COUNT, SUM and HIST add up over windows.
	Cumulative *bool `yaml:"cumulative"`
}

// Config is the exporter's YAML file (cistern exporter --config FILE):
//
//	listen: 127.0.0.1:9435
//	window: 10s
//	max_series: 1000
//	queries:
//	  - name: syscalls
//	    sql: SELECT comm, syscall, COUNT(*) AS calls FROM syscalls GROUP BY comm, syscall
type Config struct {
	Listen    string        `yaml:"listen"`
	Window    time.Duration `yaml:"window"`
	MaxSeries int           `yaml:"max_series"`
	Queries   []Query       `yaml:"queries"`
}

// Defaults of Config.
const (
	DefaultWindow    = 10 * time.Second
	DefaultMaxSeries = 1000
	DefaultListen    = "127.0.0.1:9435"
)

// ConfigError is a bad configuration: a file that cannot be read or
// parsed, a bad name or bound, or a query the exporter cannot serve (the
// CLI exits with status 2).
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

func configErrorf(format string, a ...any) error {
	return &ConfigError{fmt.Errorf(format, a...)}
}

var nameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// Load reads a YAML configuration; unknown keys are errors.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, configErrorf("--config: %v", err)
	}
	defer f.Close()
	var c Config
	d := yaml.NewDecoder(f)
	d.KnownFields(true)
	if err := d.Decode(&c); err != nil {
		return nil, configErrorf("--config %s: %v", path, err)
	}
	return &c, nil
}

// Validate fills defaults and checks names and bounds (not the SQL: the
// exporter compiles each query before it starts).
func (c *Config) Validate() error {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.MaxSeries == 0 {
		c.MaxSeries = DefaultMaxSeries
	}
	if c.Window < 10*time.Millisecond || c.MaxSeries < 1 {
		return configErrorf("window must be at least 10ms and max_series at least 1")
	}
	if len(c.Queries) == 0 {
		return configErrorf("no queries: give --query NAME='SQL' or a config file with queries")
	}
	seen := map[string]bool{}
	for i := range c.Queries {
		q := &c.Queries[i]
		if !nameRE.MatchString(q.Name) {
			return configErrorf("query name %q: want [a-zA-Z_][a-zA-Z0-9_]* (it becomes part of metric names)", q.Name)
		}
		if seen[q.Name] {
			return configErrorf("query name %q given twice", q.Name)
		}
		seen[q.Name] = true
		if q.SQL == "" {
			return configErrorf("query %s: no sql", q.Name)
		}
		if q.Window == 0 {
			q.Window = c.Window
		}
		if q.MaxSeries == 0 {
			q.MaxSeries = c.MaxSeries
		}
		if q.Window < 10*time.Millisecond || q.MaxSeries < 1 {
			return configErrorf("query %s: window must be at least 10ms and max_series at least 1", q.Name)
		}
	}
	return nil
}

func (q *Query) cumulative() bool { return q.Cumulative == nil || *q.Cumulative }

func (q *Query) String() string { return fmt.Sprintf("%s: %s", q.Name, q.SQL) }
