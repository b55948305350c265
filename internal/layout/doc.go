// Package layout holds the house's floor plan as a test: which rooms
// (top-level folders, and the services one by one) stand on which floor,
// which are product and which harness, and the lint that no import runs
// back up the floors and no product package imports a harness one
// (issue 24). The plan is drawn in the README ("The house").
package layout
