// One extended zod instance for every contract, so `.openapi()` metadata is available everywhere.
import { extendZodWithOpenApi } from '@asteasolutions/zod-to-openapi';
import { z } from 'zod';

extendZodWithOpenApi(z);

export { z };
