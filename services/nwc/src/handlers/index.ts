import type { Handler } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { charge } from './internal.charge.js';
import { connectWallet, disconnectWallet, listWallets } from './portal.js';
import { subscribe } from './public.subscribe.js';
import { validate } from './public.validate.js';

/** Every subject this service answers. */
export const allHandlers = (d: Deps): Handler[] => [validate(d), subscribe(d), listWallets(d), connectWallet(d), disconnectWallet(d), charge(d)];
