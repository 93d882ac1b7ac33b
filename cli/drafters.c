// dspark drafters: the drafter registry (src/train/registry.h), best first, for one target or all.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: dspark drafters [-m TARGET]\n"
            "  Lists the registered drafters (train --register, quantize --register), best first by\n"
            "  recorded held-out tau: target identity, tau (temperature, step), source, directory.\n"
            "  -m TARGET   only the drafters registered for this target (its identity is computed)\n"
            "  generate, eval, calibrate and serve with --spec dspark and no -d take the first one listed\n"
            "  for the loaded target whose directory still holds it.\n"
            "  Registry: $DSPARK_REGISTRY, else $XDG_DATA_HOME/dspark/drafters, else\n"
            "  ~/.local/share/dspark/drafters (one JSON file per drafter directory).\n");
}

int cmd_drafters(int argc, char **argv) {
    const char *model = NULL;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!v) return cli_missing_value(o, "drafters", usage);
        i++;
        if (!strcmp(o, "-m") || !strcmp(o, "--model")) model = v;
        else return cli_usage_error("unknown option '%s' (see dspark drafters --help)", o);
    }
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
