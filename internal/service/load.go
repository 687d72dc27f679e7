package service

import (
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/common/logging"
	"github.com/choria-temporal/provisioner/config"
)

// LoadConfig loads the provisioner configuration and makes its logger; choriaConfig and debug
// are the command line's overrides.
func LoadConfig(file, choriaConfig string, debug bool) (*config.Config, *zap.Logger, error) {
	cfg, err := config.Load(file)
	if err != nil {
		return nil, nil, err
	}
	if choriaConfig != "" {
		cfg.ChoriaConfig = choriaConfig
	}
	if debug {
		cfg.Loglevel = "debug"
	}
	log, err := logging.New(cfg.Loglevel, cfg.Logfile)
	if err != nil {
		return nil, nil, err
	}
	log = log.With(zap.String(logging.FieldSite, cfg.Site))
	for _, w := range cfg.Warnings {
		log.Warn(w)
	}
	return cfg, log, nil
}
