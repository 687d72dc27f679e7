package renewal

import "github.com/stretchr/testify/mock"

var mockAny = mock.Anything
