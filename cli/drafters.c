// dspark drafters: the drafter registry (src/train/registry.h), best first, for one target or all.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct {
    const char *model;
} drafters_args;

static const cli_opt drafters_opts[] = {
    CLI_OPT_TEXT("  Lists the registered drafters (train --register, quantize --register), best first by\n"
                 "  recorded held-out tau: target identity, tau (temperature, step), source, directory."),
    CLI_OPT_MODEL(drafters_args, model, .show = "-m TARGET",
                  .help = "only the drafters registered for this target (its identity is computed)"),
    CLI_OPT_TEXT("  generate, eval, calibrate and serve with --spec dspark and no -d take the first one listed\n"
                 "  for the loaded target whose directory still holds it.\n"
                 "  Registry: $DSPARK_REGISTRY, else $XDG_DATA_HOME/dspark/drafters, else\n"
                 "  ~/.local/share/dspark/drafters (one JSON file per drafter directory)."),
    {0},
};

const cli_command cli_drafters_cmd = {.name = "drafters",
    .summary = "list the registered drafters (dspark drafters --help)", .usage = "usage: dspark drafters [-m TARGET]",
    .col = 14, .opts = drafters_opts};

int cmd_drafters(int argc, char **argv) {
    drafters_args a = {0};
    const int rc = cli_parse(&cli_drafters_cmd, argc, argv, &a);
    if (rc) return rc == CLI_HELP ? 0 : rc;
    const char *model = a.model;
    char id[160] = "", reg[4096];
    if (model) {
        const char *path = cli_model_path(model);
        if (!path) return 1;
        ds_model *m;
        ds_status st = ds_model_load(path, NULL, &m);
        if (st) return cli_fail(st);
        ds_model_target_id(m, id, sizeof id);
        ds_model_free(m);
    }
    ds_registry_entry *v;
    int n;
    ds_status st = ds_registry_dir(reg, sizeof reg);
    if (!st) st = ds_registry_list(model ? id : NULL, &v, &n);
    if (st) return cli_fail(st);
    printf("registry %s: %d drafter%s%s%s\n", reg, n, n == 1 ? "" : "s", model ? " for " : "", model ? id : "");
    for (int i = 0; i < n; i++) {
        char tau[64] = "-";
        if (v[i].has_tau) snprintf(tau, sizeof tau, "%.3f (T=%g, step %d)", v[i].tau, v[i].temp, v[i].step);
        printf("%-26s %-24s %-9s %s%s\n", v[i].target_id, tau, v[i].source, v[i].path,
               v[i].present ? "" : "  (missing: no drafter for this target there now)");
    }
    free(v);
    return 0;
}
