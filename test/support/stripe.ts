import type { StripeServer } from '../../services/payments/test/support/stripe-server.js';

/** The settings that make payments take cards through `stripe` (a local server speaking Stripe's API). */
export function stripeEnv(stripe: StripeServer): Record<string, string> {
  return {
    CARDPROC_PROVIDER: 'stripe',
    STRIPE_SECRET_KEY: stripe.secretKey,
    STRIPE_WEBHOOK_SECRET: stripe.webhookSecret,
    STRIPE_API_URL: stripe.url,
  };
}
