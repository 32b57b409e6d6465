// Build the prebuilt lab extension into ../src/stepstone/labextension with
// @jupyterlab/builder, its shared packages those of JupyterLab's release that
// @jupyterlab/core-meta describes (no JupyterLab needs to be installed to build it).
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync } from 'node:fs';

mkdirSync('build/core', { recursive: true });
copyFileSync('node_modules/@jupyterlab/core-meta/core.package.json', 'build/core/package.json');
const built = spawnSync(
  process.execPath,
  ['node_modules/@jupyterlab/builder/lib/build-labextension.js', '--core-path', 'build/core', '.'],
  { stdio: 'inherit' }
);
process.exit(built.status ?? 1);
